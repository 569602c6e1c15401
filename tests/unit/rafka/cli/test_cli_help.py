"""The CLI's help (rafka/cli/help.py): every verb and flag described, examples under each verb that the
parser itself accepts, and a mistyped verb answered with the nearest one."""

from __future__ import annotations

import argparse
import shlex

import pytest

from rafka.cli.help import EXAMPLES, leaf_parsers
from rafka.cli.main import build_parser


def test_every_verb_and_flag_is_described_and_has_examples():
    parser = build_parser()
    leaves = dict(leaf_parsers(parser))
    assert {"topic produce", "topic consume", "group reset-offsets", "cluster health", "logs"} <= set(leaves)
    undescribed = []
    for path, sub in leaves.items():
        for action in sub._actions:
            if action.dest != "help" and not action.help:
                undescribed.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
        assert sub.epilog and sub.epilog.startswith("examples:"), f"rafka {path} has no examples"
    assert not undescribed, undescribed

    def verbs_without_help(p, path=()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                described = {c.dest for c in action._choices_actions if c.help}
                for name, sub in action.choices.items():
                    if name not in described and not any(name in (c.metavar or "") for c in action._choices_actions):
                        yield " ".join((*path, name))
                    yield from verbs_without_help(sub, (*path, name))

    aliases = {"topic delete-records"}  # an alias of trim-prefix: argparse lists its help under the verb
    assert set(verbs_without_help(parser)) <= aliases


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_examples_are_accepted_by_the_parser(path):
    parser = build_parser()
    for line in EXAMPLES[path]:
        cmd = line.split("||")[0]
        cmd = cmd[cmd.rindex("rafka ") + len("rafka ") :]
        args = shlex.split(cmd)
        parsed = parser.parse_args(args)  # an invalid example exits with status 2 here
        assert " ".join(args[: len(path.split())]) in (path, path.replace("trim-prefix", "delete-records")), line
        assert callable(parsed.func)


@pytest.mark.parametrize(
    "argv,suggestion",
    [
        (["topc", "list"], "did you mean 'topic'?"),
        (["topic", "lst"], "did you mean 'list'?"),
        (["group", "reset"], "did you mean 'reset-offsets'?"),
    ],
)
def test_a_typo_suggests_the_nearest_verb(argv, suggestion, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2 and suggestion in capsys.readouterr().err


def test_no_suggestion_for_nonsense(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["xyzzy"])
    assert "did you mean" not in capsys.readouterr().err
