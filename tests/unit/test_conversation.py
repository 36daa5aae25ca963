"""A chat request translated into the agent's terms (app/api/chat/translate.py): each
message's log row and what the continuity chain sees, every role."""

from __future__ import annotations

from app.agent.turn_request import VisibleMessage
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.config import Profile
from app.db.store import NewMessage

PIXEL = "data:image/png;base64,iVBORw0KGgo="


def _translated(messages: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    request = ChatCompletionRequest.model_validate({"model": "courier", "messages": messages})
    return turn_request(
        request, owner="o", admin=False, session_id=None, profile=Profile(), on_behalf=OnBehalf()
    )


def test_every_role_becomes_its_row_and_its_visible_message() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    req = _translated(
        [
            {"role": "system", "content": "leading: the prompt's context tier"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": PIXEL}},
                ],
            },
            {"role": "assistant", "content": "calling", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "assistant", "content": ""},
            {"role": "developer", "content": "later: kept at its place"},
            {"role": "user", "content": "and?"},
        ]
    )
    assert req.instructions == ("leading: the prompt's context tier",)
    user, asked, answered, empty, later, last = req.messages
    keys = tuple(image.sha256 for image in user.images)
    assert len(keys) == 1
    assert user.row == NewMessage(role="user", content="look", images=keys)
    assert user.visible == VisibleMessage("user", "look", images=keys)
    calls = [{"id": "c1", "name": "f", "arguments": '{"a":1}'}]
    assert asked.row == NewMessage(role="assistant", content="calling", tool_calls=calls)
    assert asked.visible == VisibleMessage("assistant", "calling", calls=(("c1", "f", '{"a":1}'),))
    assert asked.has_calls and not empty.has_calls
    assert answered.row == NewMessage(role="tool", content="42", tool_call_id="c1")
    assert answered.visible == VisibleMessage("tool", "42", call_id="c1")
    assert empty.row is None and empty.visible == VisibleMessage("assistant", "")
    assert later.row == NewMessage(role="system", content="later: kept at its place")
    assert later.visible is None
    assert req.rows(4) == [later.row, last.row]
    assert [m.param for m in req.messages] == [f"messages[{i}]" for i in range(1, 7)]
