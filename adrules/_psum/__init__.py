"""The parallel sum: ``adrules.psum`` and ``adrules.pmap``, in a package of their own.

A call's path, each step in one module. Of the modules in ``adrules/``, only
``__init__`` (which exports ``psum`` and ``pmap``) and ``derivatives`` (``jacobian``
and ``hessian`` send their columns through ``schedule.run`` too) import this package;
the core stands without it.

    psum(f, xs, *shared)                      parallel.py   the primitive and its rules:
      │                                                     f's state lifted out, xs cut
      │                                                     into chunks, one pass a phase
      ▼
    schedule.run(executor, fn, chunks)        schedule.py   the phase's chunks run where
      │                                       policy.py     the policy decides: in groups
      │                                                     in this thread, or in tasks
      │                                                     on the executor
      ▼
    chunk_forward / chunk_backward / ...      chunks.py     the chunk runner: f over a
      │                                                     group of chunks traced on one
      │                                                     tape (trace_chunks), the same
      │                                                     code wherever it runs
      ▼
    executor.map(task, batches)               executors     serial, threads, processes,
      │                                                     Dask; what travels was checked
      │                                                     first (to_workers.py), users'
      │                                                     rules go along (worker_rules.py)
      ▼
    fold                                      parallel.py   results reduced as they arrive,
                                                            in chunk order (TreeSum,
                                                            _FoldSum, _Cotangents)

Which module to open to change what:

- **add a phase** (a new pass over the chunks): its chunk function in ``chunks.py`` (at
  module level, so it pickles by reference; it keeps the group contract, see
  ``policy.py``), and the rule that runs it through ``schedule.run`` and folds its
  results in ``parallel.py``;
- **change when chunks run** (inline or on the executor, group and task sizes, the
  overhead model read, the dispatch setting): ``policy.py`` (``decide``,
  ``parallel_seconds``, ``group_size``, ``batches``, ``GROUP_SECONDS``, ``in_time``);
- **change what travels to workers**: ``to_workers.py`` (what is checked to pickle, and
  the layout arrays of inline chunks get), ``worker_rules.py`` (users' rules sent with
  every task), ``schedule._Task`` (what a task pickles).

Users call ``adrules.psum`` and ``adrules.pmap``; this package exports nothing else. Its
name has an underscore so that it never takes the place of the function ``adrules.psum``
(importing a package's module by path sets the package on its parent): import its
modules as ``from adrules._psum import schedule``.
"""
