"""Exit statuses and the exception for problems the user has to fix."""

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class InputError(Exception):
    """A problem with the user's input, reported in one line with exit status 2."""
