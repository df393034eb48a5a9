"""`bagel-data bench`: the pipeline timed against the cost of its image work.

`main` runs the benchmark; `floor` times the unavoidable work; `runs` times whole runs in
child processes; `fast` measures the opt-in approximate paths.
"""
