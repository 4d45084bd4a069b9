"""Agent mode: warpforge's tools for external coding agents, over MCP and as CLI verbs.

`tools.py` holds the tools as plain Python (`AgentTools`: task, evaluate, profile, history,
search, best), `probe.py` the child that reads a task's shapes, `server.py` the MCP server
(`warpforge mcp`) and `warpforge.cli.agent` the command-line verbs (`warpforge agent ...`). docs/agent.md
says how to connect an agent. Importing this package does not import the MCP SDK.
"""
