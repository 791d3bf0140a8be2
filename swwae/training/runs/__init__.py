"""A run's folder and everything about it that outlives the process, owned by one object,
``folder.RunFolder``: ``names`` (a run name is one path component), ``identity`` (the settings
that made its weights), ``lock`` (one run, one owner), ``decision`` (where a run starts: a pure
function of what the folder holds and what the config asks), and ``folder`` (reading the
folder through the safe reader, moving an old run aside, the mid-epoch position, metrics.json).

Import the submodule you need: importing this package imports none of them, so that the name
check (plain Python) stays cheap.
"""
