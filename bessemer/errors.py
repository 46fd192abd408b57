"""Errors the user can fix. The CLI prints them as one line (no traceback) and exits non-zero."""


class BessemerError(Exception):
    """A problem with the user's input, files or environment, with a message that says what and where."""


class ConfigError(BessemerError):
    """A bad configuration file, key or value."""


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving its state; the process should exit with `exit_code`
    (128 + signal number: 130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, signum: int, step: int):
        import signal

        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step}; state saved")
        self.exit_code = 128 + signum
