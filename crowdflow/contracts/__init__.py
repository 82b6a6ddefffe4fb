"""Contracts: what a table must hold, and how a broken promise is reported.

- :mod:`~crowdflow.contracts.tables`: the table contracts (columns, Arrow types, aliases);
- :mod:`~crowdflow.contracts.rules`: their row rules, checked with pandas;
- :mod:`~crowdflow.contracts.comparisons`: comparison tables read one way by every job;
- :mod:`~crowdflow.contracts.missing`: every missing number carries its reason;
- :mod:`~crowdflow.contracts.names`: names that become path components;
- :mod:`~crowdflow.contracts.options`: the range-checked base of every method's options;
- :mod:`~crowdflow.contracts.errors`: the error classes and the one rule that sorts every failure.

Pure data and checks: nothing here reads or writes storage.
"""
