"""Tools from MCP servers: the servers named in COURIER_MCP_CONFIG, offered as
`mcp__<server>__<tool>` beside the built-in tools.

Only `connection.py` imports the `mcp` SDK: importing it costs a second or two, and a
server with no MCP file must not pay that at start-up (main.py imports the hub only when
the setting is given).
"""
