"""Flags passages that address an AI assistant with instructions (prompt injection).

The flag travels with the chunk; deciding what to do with flagged text is the caller's job.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "ignore_instructions",
        re.compile(
            r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|"
            r"all|your|system)\b[^.\n]{0,20}\b(instructions?|prompts?|rules|guidelines)",
            re.I,
        ),
    ),
    (
        "addresses_assistant",
        re.compile(
            r"\b(dear|attention|note to|message to|hey|hello)\s+(the |any |all )?(ai|assistant|"
            r"chatbot|language model|llm)s?\b|"
            r"\byou are (now )?(an? )?(ai|assistant|chatbot|language model|llm)\b|"
            r"\bas an (ai|assistant|language model)\b[^.\n]{0,40}\b(you )?(must|should)\b",
            re.I,
        ),
    ),
    (
        "tool_call",
        re.compile(
            r"\b(call|invoke|execute|trigger)\s+(the\s+)?([\w-]+\s+)?(tool|function)s?\b",
            re.I,
        ),
    ),
    (
        "exfiltration",
        re.compile(
            r"\b(send|forward|email|post|upload|transmit|leak)\b[^.\n]{0,80}\bto\s+"
            r"(\S+@\S+\.\w+|https?://\S+|this (address|url|endpoint))",
            re.I,
        ),
    ),
    (
        "system_prompt",
        re.compile(
            r"\b(system prompt|developer message|new instructions|hidden instructions)\b|"
            r"<\|?(im_start|im_end|system|assistant)\|?>|^\s*(system|assistant)\s*:",
            re.I | re.M,
        ),
    ),
    (
        "conceal",
        re.compile(
            r"\b(do not|don't|never)\s+(tell|inform|reveal|mention)[^.\n]{0,30}\b(the )?user\b",
            re.I,
        ),
    ),
]


def scan(text: str) -> list[str]:
    """Names of the injection patterns found in `text` (empty when none)."""
    return [name for name, pattern in _PATTERNS if pattern.search(text)]
