"""client: the side that talks to the daemon or reads its file: connect(), the agent-side helpers, the CLI.

Light to import: it loads nothing of the daemon's (receive, decode, trigger, the writer)."""
