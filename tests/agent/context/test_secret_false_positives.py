"""The snapshot's secret scan on the shapes real trees hold (bench/context_scale.py lists every
refusal of the site-packages tree): AWS's documented example ids and a variable named
aws_secret_access_key are not secrets; a real-shaped id or key still is."""

from __future__ import annotations

import pytest
from m3agent.agent.context.guard import secret_in_text

REAL_ID = "AKIA" + "Q7ZX3M5N8P2R4T6V"
REAL_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "Q7ZX3M5N8P"  # 40 characters


@pytest.mark.parametrize(
    "text",
    [
        '"AccessKeyId": "AKIAIOSFODNN7EXAMPLE",',  # awscli's examples
        '"UserId": "AIDA123456789EXAMPLE",',
        "--access-key-id AKIAIOSFODNN7EXAMPLE \\",
        "        aws_secret_access_key=aws_secret_access_key,",  # boto3/session.py
        "f'aws_secret_access_key: {params.secret_access_key}\\n'",  # awscli codedeploy
    ],
)
def test_documentation_shapes_are_not_refused(text):
    assert secret_in_text(text) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (f'"AccessKeyId": "{REAL_ID}",', "an AWS access key"),
        (f"aws_secret_access_key = {REAL_KEY}\n", "an AWS secret key"),
        (f'AWS_SECRET_ACCESS_KEY: "{REAL_KEY}"', "an AWS secret key"),
        # an id that only contains EXAMPLE inside, not as its end, is still refused
        ("AKIA" + "EXAMPLE" + "Q7ZX3M5N8", "an AWS access key"),
    ],
)
def test_real_shapes_still_are(text, why):
    assert len(REAL_KEY) == 40
    assert secret_in_text(text) == why
