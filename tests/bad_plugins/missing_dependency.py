"""A plug-in that imports a package that is not installed (line 3)."""

import tune_rl_package_that_is_not_installed  # noqa: F401
