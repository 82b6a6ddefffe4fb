"""Great Expectations suites generated from the library's table contracts (:mod:`crowdflow.contracts.tables`)."""
