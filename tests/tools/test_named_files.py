"""Skill and agent files that cannot be used: each is one problem line in its own words, and
the good ones beside it still load (tools/frontmatter.read_named serves both)."""

from __future__ import annotations

from m3agent.agent.subagents.definitions import load_agents
from m3agent.tools.skills import discover_skills


def test_bad_skill_files_are_problems_and_good_ones_load(tmp_path):
    root = tmp_path / "skills"
    for name, text in {
        "good": "---\nname: Good.Skill\ndescription: does a thing\n---\nbody",
        "nodesc": "---\nname: nodesc\n---\nbody",
    }.items():
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(text)
    (root / "latin1").mkdir()
    (root / "latin1" / "SKILL.md").write_bytes(b"---\nname: x\ndescription: caf\xe9\n---\n")
    skills, problems = discover_skills([root])
    assert [s.name for s in skills] == ["Good.Skill"]  # the skill pattern allows . and capitals
    assert any("latin1/SKILL.md: unreadable (" in p for p in problems)
    assert any(p.endswith("nodesc/SKILL.md: needs a name and a description in its frontmatter")
               for p in problems)  # fmt: skip


def test_bad_agent_files_are_problems_and_good_ones_load(tmp_path):
    root = tmp_path / "agents"
    root.mkdir()
    (root / "reviewer.md").write_text("---\ndescription: reviews\n---\nRead the diff.")
    (root / "Bad.md").write_text("---\ndescription: capitals are not an agent name\n---\n")
    agents, problems = load_agents([root])
    assert [a.name for a in agents] == ["general-purpose", "reviewer"]
    assert problems == (f"{root / 'Bad.md'}: an agent needs a lowercase name and a description",)
