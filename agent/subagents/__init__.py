"""Subagents: the `task` tool runs a child session on the parent's cached prefix.
definitions.py reads agent files, child.py runs one child, task_tool.py is the tool."""

from .definitions import GENERAL, AgentDef, load_agents
from .task_tool import TaskTool

__all__ = ["GENERAL", "AgentDef", "TaskTool", "load_agents"]
