"""Typed errors: each names the model, the key and the value, and maps to a CLI exit code."""

from __future__ import annotations


def _show(value: object, limit: int = 80) -> str:
    """A short, single-line repr of a hostile or huge value for an error message."""
    text = repr(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TraceError(Exception):
    """Base class of every error the project raises on purpose. Never shown as a traceback."""

    exit_code = 1


class ConfigError(TraceError):
    """A config.json (or record) that cannot be read: bad JSON, wrong type, missing or absurd key."""

    exit_code = 2

    def __init__(self, model: str, key: str | None, value: object, reason: str) -> None:
        self.model = model
        self.key = key
        self.value = value
        self.reason = reason
        where = f"{model}: " if model else ""
        if key is None:
            msg = f"{where}{reason}"
        else:
            msg = f"{where}key {key!r} = {_show(value)}: {reason}"
        super().__init__(msg)


class JobError(ConfigError):
    """A job option (estimator.job) the estimator cannot price for this model, named with its key and value."""


class UnsupportedArchitecture(TraceError):
    """A model_type the estimator cannot reconstruct yet."""

    exit_code = 3

    def __init__(self, model: str, model_type: object, supported: tuple[str, ...]) -> None:
        self.model = model
        self.model_type = model_type
        self.supported = supported
        super().__init__(
            f"{model}: model_type {_show(model_type)} is not supported yet; "
            f"supported: {', '.join(supported)}"
        )


class ModelNotFound(TraceError):
    """MODEL is neither a local path, a snapshot id, nor reachable on the Hub."""

    exit_code = 2

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"{_show(model)}: {reason}")


class RecordError(TraceError):
    """A snapshot record that is unsafe or malformed (bad repo id, bad field)."""

    exit_code = 2

    def __init__(self, model: str, key: str, value: object, reason: str) -> None:
        self.model = model
        self.key = key
        self.value = value
        super().__init__(f"{_show(model)}: {key} = {_show(value)}: {reason}")


class MeasureError(TraceError):
    """A measured run (`neurarch-trace measure`) that cannot be made here: a config transformers cannot build, a
    CUDA-only option on the CPU, a missing library. Names the model, the key and the value where it knows them."""

    exit_code = 2

    def __init__(self, reason: str, model: str = "", key: str | None = None, value: object = None) -> None:
        self.model = model
        self.key = key
        self.value = value
        self.reason = reason
        where = f"{model}: " if model else ""
        what = f"{key} = {_show(value)}: " if key is not None else ""
        super().__init__(f"{where}{what}{reason}")

    def for_model(self, model: str) -> MeasureError:
        """The same error naming the model (the code that raised it knew only the config)."""
        return self if self.model else MeasureError(self.reason, model, self.key, self.value)


class RunFailure(TraceError):
    """A measured run that torch (or transformers, peft) stopped with an error of its own: the run failed, the
    input was not refused. Names the model, the setup and the library's error."""

    exit_code = 1

    def __init__(self, model: str, setup: str, error: BaseException) -> None:
        self.model = model
        self.setup = setup
        self.error = error
        first = (str(error).strip().splitlines() or [""])[0]
        first = first if len(first) <= 300 else first[:297] + "..."
        super().__init__(f"{model}: the run ({setup}) failed in torch: {type(error).__name__}: {first}")


class ToolFailure(TraceError):
    """A program the build runs (Pagefind) that failed: names the tool, what it was given and its exit status."""

    exit_code = 1

    def __init__(self, tool: str, key: str, value: object, output: str) -> None:
        self.tool = tool
        self.key = key
        self.value = value
        super().__init__(f"{tool} failed on {key} {_show(value)}: {output}")


class FileAccessError(TraceError):
    """A file or folder the command needed and the system refused (permission, a missing parent, a full disk)."""

    exit_code = 2

    def __init__(self, command: str, error: OSError) -> None:
        self.command = command
        self.path = error.filename
        super().__init__(f"{command}: file {_show(str(error.filename))}: {error.strerror or error}"
                         if error.filename is not None else f"{command}: {error.strerror or error}")


class InternalError(TraceError):
    """A bug: an exception the project did not expect. The command says so in one line and asks for a report."""

    exit_code = 70

    def __init__(self, command: str, error: BaseException) -> None:
        self.command = command
        self.error = error
        text = " ".join(str(error).split())
        text = text if len(text) <= 300 else text[:297] + "..."
        super().__init__(f"{command}: internal error ({type(error).__name__}: {text}); please report it")


class CrawlError(TraceError):
    """A crawl that could not start or list anything: the snapshot is left as it was."""

    exit_code = 1

    def __init__(self, where: str, key: str, value: object, reason: str) -> None:
        self.where = where
        self.key = key
        self.value = value
        super().__init__(f"crawl: {where}: {key} = {_show(value)}: {reason}")
