"""A ``core.profile.Profile`` for people: the terminal table of ``autotune profile``, the Markdown a
benchmark writes, the "which ops got faster" table of an answer beside the default, and a plot of
the hottest ops' shares (horizontal bars, one colour per profile)."""

from __future__ import annotations

from pathlib import Path

from autotune.core.profile import Entry, Profile, compare


def summary_line(p: Profile) -> str:
    """The step, how much of it the ops hold, where the rest goes, and whether the shares add up."""
    return (f"step {p.step_seconds * 1e3:.3f} ms (median of {p.runs} untraced samples; {p.traced_step_seconds * 1e3:.3f} ms "
            f"traced) on {p.device or 'this machine'}: {p.attributed:.1%} in {len(p.entries)} ops "
            f"({p.named:.1%} traced to named input instructions, {p.named_of_run:.1%} of the executor's run); unattributed {p.unattributed:.1%} "
            f"(between ops {p.between_ops:.1%}, outside the executor's run {p.outside:.1%}: launch, arguments, "
            f"results). {_handover(p)} Traced/untraced step {p.closure:.2f} (1.00: the shares add up to the step)")


def _handover(p: Profile) -> str:
    """What handing the arguments and results over costs, as a module of the same signature measured it."""
    if p.handover_missing:
        return f"Arguments and results: not measured ({p.handover_missing})."
    return (f"Handing the arguments and results over (a module of the same signature doing no work, timed beside "
            f"it): {p.handover:.1%}; named ops and hand-over together {p.accounted:.1%}.")


def _where(e: Entry) -> str:
    if not e.site:
        return "(no input instruction)"
    name, opcode, _shape = e.site.split(":", 2)
    extra = f" +{len(e.inputs) - 1}" if len(e.inputs) > 1 else ""
    return f"{name} ({opcode}{extra})"


def rows(p: Profile, top: int) -> list[tuple[str, ...]]:
    """``share, ms, op, kind, input instruction, its shape and layout, framework name`` per hot op."""
    out = []
    for e in p.hot(top):
        calls = f" x{e.calls:g}" if e.calls > 1 else ""
        out.append((f"{e.share:.1%}", f"{e.seconds * 1e3:.3f}", e.op + calls, e.kind, _where(e), e.layout or e.shape,
                    (e.source or "")[-44:]))
    return out


COLUMNS = ("share", "ms", "op (optimised)", "kind", "input instruction", "shape{layout}", "framework name")


def text(p: Profile, top: int = 15) -> str:
    """The terminal form: a title, one line per hot op (fixed columns), the summary and the kinds."""
    lines = [f"{p.module}: where the time goes under {p.label}", ""]
    body = rows(p, top)
    widths = [max(len(COLUMNS[i]), *(len(r[i]) for r in body)) if body else len(COLUMNS[i]) for i in range(len(COLUMNS))]
    widths = [min(w, 44) for w in widths]

    def fmt(cells):
        return "  ".join(c.rjust(w) if i < 2 else c[:w].ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines += [fmt(COLUMNS)] + [fmt(r) for r in body]
    if len(p.entries) > top:
        rest = sum(e.share for e in p.entries[top:])
        lines.append(f"... {len(p.entries) - top} more ops: {rest:.1%}")
    kinds = ", ".join(f"{k} {v:.1%}" for k, v in p.by_kind()[:6])
    return "\n".join(lines + ["", summary_line(p), f"by kind: {kinds}", ""])


def print_profile(p: Profile, top: int = 15) -> None:
    import click

    click.echo(text(p, top))


def faster_rows(default: Profile, answer: Profile, top: int) -> list[tuple[str, str, str, str]]:
    """``input instruction, ms before, ms after, ratio`` for the sites whose time changed most."""
    return [(c.site, f"{c.before * 1e3:.3f}", f"{c.after * 1e3:.3f}", f"{c.ratio:.2f}" if c.before > 0 else "new")
            for c in compare(default, answer)[:top]]


def comparison_text(default: Profile, answer: Profile, top: int = 15) -> str:
    """"Which ops got faster": per input instruction, its time under the default and under the answer."""
    ratio = answer.step_seconds / default.step_seconds if default.step_seconds else float("nan")
    lines = [f"Which ops got faster: {answer.label} against {default.label} (step {ratio:.3f} of the default's; "
             "each timed in its own profile, so read small differences as noise)", ""]
    body = faster_rows(default, answer, top)
    head = ("input instruction", "ms before", "ms after", "after/before")
    w0 = min(70, max([len(head[0])] + [len(r[0]) for r in body]))
    lines.append(f"{head[0]:<{w0}}  {head[1]:>10}  {head[2]:>10}  {head[3]:>12}")
    lines += [f"{r[0][:w0]:<{w0}}  {r[1]:>10}  {r[2]:>10}  {r[3]:>12}" for r in body]
    return "\n".join(lines + [""])


def print_comparison(default: Profile, answer: Profile, top: int = 15) -> None:
    import click

    click.echo(comparison_text(default, answer, top))


def markdown(p: Profile, top: int = 15) -> str:
    """The profile as a Markdown section (a benchmark's results file)."""
    lines = [f"### {p.module} ({p.label})", "", summary_line(p), "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows(p, top)]
    kinds = ", ".join(f"{k} {v:.1%}" for k, v in p.by_kind()[:6])
    return "\n".join(lines + ["", f"By kind: {kinds}", ""])


def draw(ax, profiles: list[Profile], top: int = 12, title: str | None = None) -> None:
    """Horizontal bars of the hottest input instructions' shares of the step on ``ax``, one bar per
    profile: the first profile's hottest sites, an answer's drawn beside them in the default's units."""
    first = profiles[0]
    sites = [s for s, _ in first.hot_sites(0.0)[:top]]
    labels = [s.split(":", 2)[0] + " (" + s.split(":", 2)[1] + ")" for s in sites]
    height = 0.8 / len(profiles)
    for k, p in enumerate(profiles):
        shares = dict(p.hot_sites(0.0))
        scale = p.step_seconds / first.step_seconds if first.step_seconds else 1.0  # seconds compare
        ys = [i + k * height for i in range(len(sites))]
        ax.barh(ys, [100 * shares.get(s, 0.0) * scale for s in sites], height=height, label=p.label)
    ax.set_yticks([i + height * (len(profiles) - 1) / 2 for i in range(len(sites))], labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"% of {first.label}'s step ({first.step_seconds * 1e3:.2f} ms)", fontsize=8)
    ax.set_title(title or f"{first.module}: {first.named:.0%} named, {first.unattributed:.0%} unattributed",
                 fontsize=9)
    if len(profiles) > 1:
        ax.legend(fontsize=7)


def plot(profiles: list[Profile], path: Path, top: int = 12, title: str | None = None) -> None:
    """``draw`` into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 0.45 * top + 1.6))
    draw(ax, profiles, top, title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
