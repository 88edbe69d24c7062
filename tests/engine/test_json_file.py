"""engine/json_file.py: every way a JSON file can be bad, each one line naming the file."""

from __future__ import annotations

import pytest
from m3agent.engine.json_file import read_json, read_json_object


def test_a_good_file_reads_as_its_value(tmp_path):
    (tmp_path / "a.json").write_text('{"k": [1, 2]}')
    (tmp_path / "b.json").write_text("[1]")
    assert read_json_object(tmp_path / "a.json") == {"k": [1, 2]}
    assert read_json(tmp_path / "b.json") == [1]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, r"x.json does not exist$"),
        (lambda p: p.mkdir(), r"^cannot read .*x.json: Is a directory$"),
        (lambda p: p.write_bytes(b"\xff\xfe{"), r"^cannot read .*x.json: 'utf-8' codec"),
        (lambda p: p.write_text('{\n  "a": 1,\n}'), r"x.json is not valid JSON \(line 3: "),
        (lambda p: p.write_text("[1, 2]"), r"x.json must hold a JSON object$"),
    ],
    ids=["missing", "a-directory", "not-utf8", "broken", "not-an-object"],
)
def test_each_failure_is_one_line_naming_the_file(tmp_path, make, message):
    path = tmp_path / "x.json"
    make(path)
    with pytest.raises(ValueError, match=message) as e:
        read_json_object(path)
    assert "\n" not in str(e.value)


def test_a_missing_file_may_stand_for_an_empty_object(tmp_path):
    assert read_json_object(tmp_path / "none.json", missing_ok=True) == {}
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_json_object(tmp_path / "bad.json", missing_ok=True)
