"""Reading shell commands for the guard: by their structure, as bash will run them.

`syntax` lexes a command into simple commands and words; `words` expands them as far as
the command line fixes them; `interpreters` reads code handed to `python -c` and the
like; `programs` knows what each program does with its words; `effects` walks it all and
says what the command does (`assess`), for the command guard and the path checks.
"""
