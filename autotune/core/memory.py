"""Running an execution that its worker's memory share refuses.

Workers split the machine's memory between them (``autotune.core.workers``); an execution whose
inputs and temporaries exceed one worker's share is refused before it allocates anything. Some
checks (a large region of an LLM step, its f32 second opinion) need more than one share but fit the
machine; they get one more try on a single worker holding every share. Validation and the
precision checks both use it, hence a module of its own.
"""

from __future__ import annotations

from autotune.errors import BadInput


def with_memory(pipeline, call):
    """``call()``; when its worker's memory share refuses it (``BadInput``), once more on one worker
    holding every worker's share (``pipeline.exclusive``; where that lifts nothing, the refusal
    stands). An execution is refused by its worker's share before it allocates anything."""
    try:
        return call()
    except BadInput as refused:
        with pipeline.exclusive() as lifted:
            if not lifted:
                raise refused from None
            return call()
