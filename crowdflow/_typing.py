"""Type aliases shared by the library (static typing only; no runtime behaviour).

``scipy.sparse.spmatrix`` is a mixin in SciPy's own type stubs (scipy-stubs): it carries no ``.T``,
``.diagonal()`` or ``.indptr``. Functions that accept "any SciPy sparse matrix" are annotated with
:data:`SparseMatrix` instead: the 2-D formats the library builds or receives (CSR, CSC, COO, as
``*_matrix`` or ``*_array``). All of them are converted with ``sp.csr_matrix(x)`` where a format matters.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import scipy.sparse as sp  # used in the string alias below

SparseMatrix: TypeAlias = (
    "sp.csr_matrix[Any] | sp.csc_matrix[Any] | sp.coo_matrix[Any]"
    " | sp.csr_array[Any, Any] | sp.csc_array[Any] | sp.coo_array[Any, Any]"
)
