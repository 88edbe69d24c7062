"""Skill and agent files that cannot be used: each is one problem line in its own words, and
the good ones beside it still load (tools/frontmatter.read_named serves both)."""

from __future__ import annotations

from m3agent.agent.subagents.definitions import load_agents
from m3agent.tools.host_read import default_reader
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
    skills, problems = discover_skills([root], default_reader(tmp_path))
    assert [s.name for s in skills] == ["Good.Skill"]  # the skill pattern allows . and capitals
    assert any("latin1/SKILL.md: unreadable (" in p for p in problems)
    assert any(p.endswith("nodesc/SKILL.md: needs a name and a description in its frontmatter")
               for p in problems)  # fmt: skip


def test_bad_agent_files_are_problems_and_good_ones_load(tmp_path):
    root = tmp_path / "agents"
    root.mkdir()
    (root / "reviewer.md").write_text("---\ndescription: reviews\n---\nRead the diff.")
    (root / "Bad.md").write_text("---\ndescription: capitals are not an agent name\n---\n")
    agents, problems = load_agents([root], default_reader(tmp_path))
    assert [a.name for a in agents] == ["general-purpose", "reviewer"]
    assert problems == (f"{root / 'Bad.md'}: an agent needs a lowercase name and a description",)


def test_nested_list_fields_read_as_text_and_never_break_discovery(tmp_path):
    """A list inside a `[...]` list or a `- [...]` item is not in the subset we read: it stays
    text, so a hostile or odd SKILL.md or agent file cannot crash the listing."""
    root = tmp_path / "skills"
    for name, text in {
        "flow": "---\nname: flow\ndescription: [[a], b]\n---\nbody",
        "items": "---\nname: items\ndescription:\n- [x, y]\n- z\n---\nbody",
        "good": "---\nname: good\ndescription: fine\n---\nbody",
    }.items():
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(text)
    skills, problems = discover_skills([root], default_reader(tmp_path))
    assert problems == ()
    assert {s.name: s.description for s in skills} == {
        "flow": "[a], b",
        "good": "fine",
        "items": "[x, y], z",
    }
    agents_dir = tmp_path / "agents"
    agents_dir.mkdir()
    (agents_dir / "odd.md").write_text("---\ndescription: [[r]]\ntools: [[Read], Grep]\n---\nx")
    agents, problems = load_agents([agents_dir], default_reader(tmp_path))
    assert problems == ()
    assert "odd" in [a.name for a in agents]
