"""Each API surface's wire: OpenAI chat and completions (`openai/`), the Responses API
(`responses/`), Anthropic's Messages API (`messages/`), and what they share: the
translation to chat, content blocks, the sealed reasoning clients carry across turns.
"""
