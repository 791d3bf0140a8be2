"""A run's folder and everything about it that outlives the process, owned by one object,
``folder.RunFolder``: ``identity`` (the settings that made its weights; a run name is one path
component), ``decision`` (where a run starts: a pure function of what the folder holds and what
the config asks), and ``folder`` (the lock: one run, one owner; reading the folder through the
safe reader, moving an old run aside, the mid-epoch position, metrics.json); ``sweep_claim``
(a sweep's jobs never share a run folder).

Import the submodule you need: importing this package imports none of them, so that the name
check (plain Python) stays cheap.
"""
