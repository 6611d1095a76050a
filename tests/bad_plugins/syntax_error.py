"""A plug-in with a syntax error on line 4."""


def broken(:
    pass
