"""Running a search: checks before it starts (preflight), Tune's schedulers and searchers, the run
itself (runner), its live view and files, resume, re-training on fresh seeds (verify), Ray Jobs.

The package is also the Python API's `tr.search(...)`: once anything imports this subpackage, the import system
sets it as the attribute `search` of tune_runner, so the package itself answers the call
(tune_runner.api.search) rather than shadowing the function.
"""

import sys
from types import ModuleType
from typing import Any


class _CallablePackage(ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tune_runner.api import search

        return search(*args, **kwargs)

    @property
    def __signature__(self) -> Any:  # help(tr.search) and IDEs show the API's parameters
        import inspect

        from tune_runner.api import searching

        return inspect.signature(searching.search)


sys.modules[__name__].__class__ = _CallablePackage
