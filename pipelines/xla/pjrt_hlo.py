"""Compile a serialized ``HloModuleProto`` for a GPU target straight through the CUDA plugin's PJRT C API.

Why not jax's compile-only client: it takes only an MLIR module, so every GPU step paid for an MLIR
round trip: ``hlo_to_stablehlo`` here, versioned StableHLO serialisation in jaxlib, deserialisation
and StableHLO -> HLO conversion in the plugin (about two thirds of a step, profiled on LLaMA-3's decode
step; the HLO passes a step exists for were a fifth). The round trip also changed the module between
steps (it folds the identity transposes and reshapes some passes leave, work no XLA pass did) and
could not import SPMD-partitioned steps at all ("CHLO => StableHLO failed"). The C API's ``PJRT_Compile``
also takes a program in format ``"hlo"``: the serialized module as it is, with the same compile options
and the same topology. ``docs/gpu.md`` has the measurements.

This is a ctypes binding of the six entry points it needs, laid out as ``xla/pjrt/c/pjrt_c_api.h``
declares them: the ``PJRT_Api`` table only ever grows at its end (a reordering bumps the major
version, checked here), and every argument struct starts with its own size, so a plugin reads only
the fields this caller knows. ``PjrtHloCompiler`` checks the version and that the topology it made
reports the ``cuda`` platform before it is used; anything unexpected raises ``Unavailable`` with the
reason, and the GPU worker then refuses to start (it never falls back to a path that judges
differently). The plugin is jax's CUDA 12 or CUDA 13 one, whichever jax loaded (``cuda_plugin``):
the C API is the same.
"""

from __future__ import annotations

import ctypes as C
import importlib.util
from pathlib import Path

from autotune.pipelines.xla import versions

#: Index of each entry point in ``PJRT_Api`` after its header (struct_size, extension_start,
#: PJRT_Api_Version), per pjrt_c_api.h (PJRT_API_MAJOR 0).
_ERROR_DESTROY, _ERROR_MESSAGE = 0, 1
_EXECUTABLE_DESTROY = 40
_TOPOLOGY_CREATE, _TOPOLOGY_PLATFORM_NAME = 82, 84
_COMPILE = 89
_NAMED_STRING = 0


class Unavailable(RuntimeError):
    """The installed plugin's C API is not the one this binding was written against."""


class _Version(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("major", C.c_int), ("minor", C.c_int)]


class _ApiHeader(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("extension_start", C.c_void_p), ("version", _Version)]


class _NamedValue(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("name", C.c_char_p), ("name_size", C.c_size_t),
                ("type", C.c_int), ("value", C.c_void_p), ("value_size", C.c_size_t)]


class _TopologyCreate(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("topology_name", C.c_char_p),
                ("topology_name_size", C.c_size_t), ("create_options", C.POINTER(_NamedValue)),
                ("num_options", C.c_size_t), ("topology", C.c_void_p)]


class _TopologyPlatformName(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("topology", C.c_void_p),
                ("name", C.POINTER(C.c_char)), ("name_size", C.c_size_t)]


class _Program(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("code", C.c_char_p), ("code_size", C.c_size_t),
                ("format", C.c_char_p), ("format_size", C.c_size_t)]


class _Compile(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("topology", C.c_void_p),
                ("program", C.POINTER(_Program)), ("compile_options", C.c_char_p),
                ("compile_options_size", C.c_size_t), ("client", C.c_void_p), ("executable", C.c_void_p)]


class _ErrorMessage(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("error", C.c_void_p),
                ("message", C.POINTER(C.c_char)), ("message_size", C.c_size_t)]


class _Handle(C.Structure):
    """``PJRT_Error_Destroy_Args`` and ``PJRT_Executable_Destroy_Args``: size, priv, one pointer."""
    _fields_ = [("struct_size", C.c_size_t), ("priv", C.c_void_p), ("handle", C.c_void_p)]


def _args(struct_type, *values):
    return struct_type(C.sizeof(struct_type), None, *values)


def cuda_plugin() -> tuple[str, Path]:
    """The module and library of the CUDA plugin jax loaded: CUDA 12's or CUDA 13's
    (``versions.CUDA_PLUGINS``), told apart by which library this process has mapped (both register
    the platform ``cuda``; only the one jax initialised may be driven). With both installed jax maps
    both and registers the first in ``CUDA_PLUGINS`` order (see there), which is then the one chosen;
    before jax loads either, or where the process's mappings cannot be read, the first installed."""
    installed = []
    for name in versions.at(versions.CUDA_PLUGINS):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            installed.append((name, Path(spec.origin).resolve().parent / "xla_cuda_plugin.so"))
    if not installed:
        raise Unavailable("jax's CUDA plugin is not installed (install xla-autotune[gpu])")
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            mapped = fh.read()
    except OSError:
        mapped = ""
    for name, library in installed:
        if str(library) in mapped:
            return name, library
    return installed[0]


def cuda_api() -> int:
    """The address of the CUDA plugin's ``PJRT_Api``: the library jax loaded (a topology made through
    ``jax.experimental.topologies`` loads it), initialised as jax initialises it."""
    from jax._src.lib import xla_client

    _, library = cuda_plugin()
    if not library.is_file() or not xla_client.pjrt_plugin_loaded("cuda"):
        raise Unavailable(f"jax has not loaded the CUDA plugin ({library})")
    if not xla_client.pjrt_plugin_initialized("cuda"):
        xla_client.initialize_pjrt_plugin("cuda")
    get_api = C.CDLL(str(library)).GetPjrtApi  # dlopen of a loaded library: the same one, the same table
    get_api.restype = C.c_void_p
    return get_api()


class PjrtHloCompiler:
    """``compile(proto, overrides)`` for one GPU topology (a ``GpuTargetConfig`` text, one device)."""

    def __init__(self, target_config: str, api: int | None = None):
        self._api = api if api is not None else cuda_api()
        header = _ApiHeader.from_address(self._api)
        self.version = (header.version.major, header.version.minor)
        last = C.sizeof(_ApiHeader) + C.sizeof(C.c_void_p) * (_COMPILE + 1)
        if header.version.major != 0 or header.struct_size < last:
            raise Unavailable(f"PJRT C API {self.version[0]}.{self.version[1]} (table of {header.struct_size} bytes) "
                              "is not the layout this binding knows (major 0, PJRT_Compile present)")
        self._error_destroy = self._void(_ERROR_DESTROY)
        self._error_message = self._void(_ERROR_MESSAGE)
        self._executable_destroy = self._fn(_EXECUTABLE_DESTROY)
        self._compile = self._fn(_COMPILE)
        self._keep = [target_config.encode(), b"1x1x1"]  # the topology may keep pointers into these
        options = (_NamedValue * 2)()
        for i, (name, value) in enumerate(zip((b"target_config", b"topology"), self._keep)):
            options[i] = _args(_NamedValue, name, len(name), _NAMED_STRING, C.cast(C.c_char_p(value), C.c_void_p),
                               len(value))
        self._keep.append(options)
        create = _args(_TopologyCreate, b"", 0, options, 2, None)
        self._raise(self._fn(_TOPOLOGY_CREATE)(C.addressof(create)), "topology")
        self._topology = create.topology
        name = _args(_TopologyPlatformName, self._topology, None, 0)
        self._raise(self._fn(_TOPOLOGY_PLATFORM_NAME)(C.addressof(name)), "topology platform")
        platform = C.string_at(name.name, name.name_size).decode()
        if platform != "cuda":
            raise Unavailable(f"the plugin's topology reports platform {platform!r}, not 'cuda'")

    def compile(self, proto: bytes, options: bytes) -> str | None:
        """Compile a serialized ``HloModuleProto`` with a serialized ``CompileOptionsProto``; the
        error message XLA returned, or None when the compile went through (the executable is freed)."""
        program = _args(_Program, proto, len(proto), b"hlo", 3)
        args = _args(_Compile, self._topology, C.pointer(program), options, len(options), None, None)
        message = self._message(self._compile(C.addressof(args)))
        if args.executable:
            self._executable_destroy(C.addressof(_args(_Handle, args.executable)))
        return message

    # ---- the C API table -----------------------------------------------------------------------------
    def _slot(self, index: int) -> int:
        return C.c_void_p.from_address(self._api + C.sizeof(_ApiHeader) + C.sizeof(C.c_void_p) * index).value

    def _fn(self, index: int):
        return C.CFUNCTYPE(C.c_void_p, C.c_void_p)(self._slot(index))

    def _void(self, index: int):
        return C.CFUNCTYPE(None, C.c_void_p)(self._slot(index))

    def _message(self, error: int | None) -> str | None:
        if not error:
            return None
        args = _args(_ErrorMessage, error, None, 0)
        self._error_message(C.addressof(args))
        text = C.string_at(args.message, args.message_size).decode(errors="replace")
        self._error_destroy(C.addressof(_args(_Handle, error)))
        return text

    def _raise(self, error: int | None, what: str) -> None:
        message = self._message(error)
        if message is not None:
            raise Unavailable(f"PJRT {what}: {message.splitlines()[0][:300]}")
