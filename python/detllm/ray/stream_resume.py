"""Resuming a deterministic stream on another replica without repeating or dropping a token.

The router keeps, per choice, what it has sent: the token entries (ids with their logprobs, as
the server wrote them) and the text. When a replica dies mid-stream the same request (same
seed) is re-run on a replica with the same fingerprint, which gives the same tokens from the
first one on. Its chunks are fed through the same StreamState: entries and text already sent
are *compared* with what was sent (token ids and logprobs, never re-encoded text) and dropped;
what lies beyond is sent. So the client sees one stream whose concatenation is the
uninterrupted run's, and a replay that differs is an error, never a silent splice.

Chunks may group tokens and text differently on the replay (the server sends what is ready),
which is why positions are counted in entries and characters, not in chunks.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional


class ReplayMismatch(RuntimeError):
    """The re-run's output differs from what was already sent (a broken determinism claim)."""


def _key(entry: Any) -> str:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"))


class _Seq:
    """A position-counted sequence of sent items; `offer` returns the part not yet sent."""

    def __init__(self):
        self.sent: List[str] = []  # canonical JSON of each sent item
        self.seen = 0  # items seen in the current attempt

    def restart(self):
        self.seen = 0

    def offer(self, items: List[Any], what: str) -> List[Any]:
        new = []
        for item in items:
            k = _key(item)
            if self.seen < len(self.sent):
                if self.sent[self.seen] != k:
                    raise ReplayMismatch(f"{what} {self.seen} of the re-run is {k}, but {self.sent[self.seen]} was sent")
            else:
                self.sent.append(k)
                new.append(item)
            self.seen += 1
        return new


class _Text:
    def __init__(self):
        self.sent = ""
        self.seen = 0

    def restart(self):
        self.seen = 0

    def offer(self, text: str, what: str) -> str:
        start, end = self.seen, self.seen + len(text)
        self.seen = end
        known = self.sent[start:end]
        if text[:len(known)] != known:
            raise ReplayMismatch(f"the {what} of the re-run differs from the sent text at "
                                 f"character {start}: {text[:len(known)]!r} vs {known!r}")
        new = text[len(known):]
        self.sent += new
        return new


class _Choice:
    def __init__(self):
        self.tokens = _Seq()
        self.tool_calls = _Seq()
        self.texts: Dict[str, _Text] = {}
        self.role_sent = False
        self.finished = False

    def text(self, field: str) -> _Text:
        return self.texts.setdefault(field, _Text())

    def restart(self):
        self.tokens.restart()
        self.tool_calls.restart()
        for t in self.texts.values():
            t.restart()


_COMPLETION_ARRAYS = ("tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids")
_CHAT_TEXTS = ("content", "reasoning_content")


class StreamState:
    """Everything sent on one streamed response, to resume it elsewhere.

    chat: /v1/chat/completions chunks (delta, logprobs.content) or /v1/completions chunks
    (text, logprobs arrays). strip_logprobs: the router asked for logprobs only to see token
    ids (the client did not), so they are removed from what is sent."""

    def __init__(self, chat: bool, strip_logprobs: bool):
        self.chat = chat
        self.strip_logprobs = strip_logprobs
        self.choices: Dict[int, _Choice] = {}
        self.usage_sent = False
        self.first_id: Optional[str] = None
        self.first_created: Optional[int] = None
        self.chunks_sent = 0
        self.attempt = 0

    def restart(self):
        """A new attempt on another replica begins: positions count from the start again."""
        self.attempt += 1
        for c in self.choices.values():
            c.restart()

    def sent_tokens(self, index: int) -> int:
        c = self.choices.get(index)
        return len(c.tokens.sent) if c else 0

    def all_finished(self) -> bool:
        return bool(self.choices) and all(c.finished for c in self.choices.values())

    def accept(self, chunk: dict) -> Optional[dict]:
        """The part of `chunk` not yet sent (ids rewritten to the first attempt's), or None."""
        if self.first_id is None:
            self.first_id, self.first_created = chunk.get("id"), chunk.get("created")
        else:
            chunk["id"], chunk["created"] = self.first_id, self.first_created
        choices = chunk.get("choices")
        if not choices:  # the usage chunk (include_usage): once
            if chunk.get("usage"):
                if self.usage_sent:
                    return None
                self.usage_sent = True
            return chunk
        out = []
        for choice in choices:
            kept = self._accept_choice(choice)
            if kept is not None:
                out.append(kept)
        if not out:
            return None
        chunk["choices"] = out
        return chunk

    def _accept_choice(self, choice: dict) -> Optional[dict]:
        st = self.choices.setdefault(int(choice.get("index", 0)), _Choice())
        if st.finished:
            return None  # a re-run's copy of a choice that already ended
        new_anything = False
        lp = choice.get("logprobs")
        if self.chat:
            entries = (lp or {}).get("content") or []
            new_entries = st.tokens.offer(entries, "token")
            delta = choice.get("delta") or {}
            if "role" in delta:
                if st.role_sent:
                    del delta["role"]
                else:
                    st.role_sent = True
                    new_anything = True
            for field in _CHAT_TEXTS:
                if isinstance(delta.get(field), str):
                    piece = st.text(field).offer(delta[field], field)
                    if piece:
                        delta[field] = piece
                        new_anything = True
                    elif "role" in delta and field == "content":
                        delta[field] = ""
                    else:
                        del delta[field]
            if delta.get("tool_calls"):
                calls = st.tool_calls.offer(delta["tool_calls"], "tool-call delta")
                if calls:
                    delta["tool_calls"] = calls
                    new_anything = True
                else:
                    del delta["tool_calls"]
            choice["delta"] = delta
            if self.strip_logprobs:
                choice["logprobs"] = None
            elif lp is not None:
                lp["content"] = new_entries
        else:
            n = len((lp or {}).get("tokens") or [])
            entries = [[(lp.get(k) or [None] * n)[i] for k in _COMPLETION_ARRAYS]
                       for i in range(n)]
            new_entries = st.tokens.offer(entries, "token")
            skip = n - len(new_entries)
            if isinstance(choice.get("text"), str):
                choice["text"] = st.text("text").offer(choice["text"], "text")
                new_anything = new_anything or bool(choice["text"])
            if self.strip_logprobs:
                choice["logprobs"] = None
            elif lp is not None:
                for k in _COMPLETION_ARRAYS:
                    if isinstance(lp.get(k), list):
                        lp[k] = lp[k][skip:]
        new_anything = new_anything or bool(new_entries)
        if choice.get("finish_reason") is not None:
            st.finished = True
            new_anything = True
        if not new_anything:
            return None
        return choice
