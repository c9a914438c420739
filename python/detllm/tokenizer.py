"""detllm's tokenizer as vLLM's ``LLM.get_tokenizer()`` hands it out: the engine's own C++
tokenizer (src/tokenizer, checked against Hugging Face's) with the methods RL code calls on a
transformers tokenizer: encode, decode, apply_chat_template, convert_ids_to_tokens, ...

The chat template is rendered by the server's code (server/chat_prompt.h, through
``_core.ChatRenderer``), so ``apply_chat_template`` gives the text ``/v1/chat/completions``
makes of the same messages, tools and chat_template_kwargs.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _core


def _jsonable(v: Any) -> Any:
    """Messages may hold numpy ints or tuples; JSON needs plain values."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


class Tokenizer:
    """A model's tokenizer, shaped like a transformers ``PreTrainedTokenizer`` where RL code
    uses one. Not a transformers object: ``encode`` returns a list of ids, there are no
    tensors (``return_tensors`` is refused)."""

    def __init__(self, session: "_core.Session") -> None:
        if not session.has_tokenizer:
            raise ValueError(f"{session.model_name} has no tokenizer (a synthetic model): "
                             "prompts are token ids")
        self._s = session
        self._chat: Optional[_core.ChatRenderer] = None

    # ---- ids <-> text ----
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return list(self._s.encode(text, add_special_tokens))

    def decode(self, token_ids: Union[int, Sequence[int]], skip_special_tokens: bool = False) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        return self._s.decode([int(t) for t in token_ids], skip_special_tokens)

    def __call__(self, text: Union[str, Sequence[str]], add_special_tokens: bool = True,
                 **kwargs: Any) -> Dict[str, Any]:
        if kwargs:
            raise ValueError(f"Tokenizer(...): {sorted(kwargs)} not supported (only text and "
                             "add_special_tokens; the result is {'input_ids': list})")
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]) -> Union[str, List[str]]:
        if isinstance(ids, int):
            return self._s.id_to_token(ids)
        return [self._s.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]) -> Union[Optional[int], List[Optional[int]]]:
        if isinstance(tokens, str):
            return self._s.token_to_id(tokens)
        return [self._s.token_to_id(t) for t in tokens]

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._s.eos_token_id

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._s.bos_token_id

    @property
    def eos_token(self) -> Optional[str]:
        i = self.eos_token_id
        return None if i is None else self._s.id_to_token(i)

    @property
    def bos_token(self) -> Optional[str]:
        i = self.bos_token_id
        return None if i is None else self._s.id_to_token(i)

    @property
    def vocab_size(self) -> int:
        return int(self._s.vocab_size)

    def __len__(self) -> int:
        return self.vocab_size

    # ---- chat ----
    @property
    def chat_template(self) -> str:
        return self._renderer().source

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        *,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        chat_template_kwargs: Optional[Mapping[str, Any]] = None,
        return_tensors: Any = None,
        **template_kwargs: Any,
    ) -> Union[str, List[int]]:
        """transformers' ``apply_chat_template``: the model's own template over OpenAI-style
        messages (``tool_calls``, ``tool_call_id`` and ``name`` included), ``tools`` as OpenAI
        function tools, extra keywords as template variables (e.g. ``enable_thinking=False``).
        Returns token ids (``tokenize=True``, the default, as transformers) or the text. A
        conversation the template refuses is a ``ValueError`` carrying its message."""
        if return_tensors is not None:
            raise ValueError("apply_chat_template: return_tensors is not supported (token ids "
                             "come back as a list)")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are exclusive: "
                             "the first continues the last message, the second opens a new one")
        text = self.render_chat(conversation, tools=tools,
                                add_generation_prompt=add_generation_prompt,
                                continue_final_message=continue_final_message,
                                chat_template_kwargs={**(chat_template_kwargs or {}), **template_kwargs})
        # The template writes the special tokens (BOS included) itself.
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                    tools: Optional[Sequence[Mapping[str, Any]]] = None,
                    add_generation_prompt: bool = True, continue_final_message: bool = False,
                    chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> str:
        if isinstance(messages, (str, bytes)) or not all(isinstance(m, Mapping) for m in messages):
            raise ValueError("messages must be a list of dicts {'role': ..., 'content': ...}")
        body: Dict[str, Any] = {"messages": _jsonable(list(messages)),
                                "add_generation_prompt": bool(add_generation_prompt)}
        if tools:
            body["tools"] = _jsonable(list(tools))
        if chat_template_kwargs:
            body["chat_template_kwargs"] = _jsonable(dict(chat_template_kwargs))
        return self._renderer().render(json.dumps(body), bool(continue_final_message))

    def _renderer(self) -> "_core.ChatRenderer":
        if self._chat is None:
            self._chat = _core.ChatRenderer(self._s)
        return self._chat
