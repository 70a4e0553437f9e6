"""What helpers written for any environment (tests/agents/support.py ``Team``) ask of one:
``manage.py`` commands, and the teams and operators made with them.

A live environment (tests/support/live.py) runs each command in a process of its own; the
in-process one (tests/support/inproc.py) in this process, on the test database. Each
writes ``manage``; the rest is written once, here.
"""
import json


class ManageCommands:
    def manage(self, *args: str, check: bool = True) -> str:
        """``manage.py ARGS``: its stdout; a failure raises."""
        raise NotImplementedError

    def manage_json(self, *args: str) -> dict:
        return json.loads(self.manage(*args, "--json"))

    def team_create(self, name: str = "t") -> dict:
        return self.manage_json("team_create", name)

    def operator_create(self, username: str = "op", viewer: bool = False) -> dict:
        args = ["operator_create", username, "--password", "pw-" + username, "--skip-password-validation"]
        if viewer:
            args.append("--viewer")
        return self.manage_json(*args)
