"""A reasoning parser for vLLM's `--reasoning-parser-plugin`, for the served-model tests: SmolLM2
does not reason, so this parser calls the first few tokens of an answer its reasoning when the
request turns thinking on (`chat_template_kwargs: {"enable_thinking": true}`, llmcli's `--think`),
and nothing otherwise. vLLM then streams those tokens in its `reasoning` field, as it does for a
real reasoning model, so the tests see what llmcli makes of that field. Loaded by vLLM's own
interpreter (its venv), never by llmcli's."""

from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.reasoning import ReasoningParser, ReasoningParserManager

THOUGHT_TOKENS = 3


@ReasoningParserManager.register_module("llmcli-test")
class FirstTokensReasoningParser(ReasoningParser):
    def __init__(self, tokenizer, *args, **kwargs):
        super().__init__(tokenizer, *args, **kwargs)
        template_kwargs = kwargs.get("chat_template_kwargs") or {}
        self.thinking = bool(template_kwargs.get("enable_thinking"))

    # asked of the prompt: a request without thinking starts with its reasoning over (all answer)
    def is_reasoning_end(self, input_ids):
        return not self.thinking

    def is_reasoning_end_streaming(self, input_ids, delta_ids):
        return not self.thinking or len(input_ids) >= THOUGHT_TOKENS

    def extract_content_ids(self, input_ids):
        return input_ids[THOUGHT_TOKENS:] if self.thinking else input_ids

    def extract_reasoning(self, model_output, request):
        if not self.thinking:
            return None, model_output
        ids = self.model_tokenizer.encode(model_output, add_special_tokens=False)
        head = self.model_tokenizer.decode(ids[:THOUGHT_TOKENS])
        return head, model_output[len(head) :] or None

    def extract_reasoning_streaming(
        self, previous_text, current_text, delta_text, previous_token_ids, current_token_ids, delta_token_ids
    ):
        if not delta_text:
            return None
        if self.thinking and len(previous_token_ids) < THOUGHT_TOKENS:
            return DeltaMessage(reasoning=delta_text)
        return DeltaMessage(content=delta_text)
