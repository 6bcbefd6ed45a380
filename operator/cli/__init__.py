"""`kubectl floe`, the day-2 command line of StreamingApps (a kubectl plugin: the console script
`kubectl-floe` on PATH is found by kubectl's plugin discovery).

`main` runs the verbs; `kubectl` is the one place it talks to the API server (the user's own
kubectl, as a subprocess); `args` is the command line; `views` (patch bodies, what status shows)
and `checks` (the runtime's configuration check of `validate`) are pure.
"""
