"""What the user sees instead of an answer that was refused."""

from __future__ import annotations

SELF_HARM_SUPPORT = (
    "I'm really sorry you're feeling this way, and I'm glad you reached out. You don't have "
    "to go through this alone. If you are in immediate danger, please call your local "
    "emergency number (112 in Europe, 911 in the US, 999 in the UK) now. You can talk to "
    "someone at any hour: in the US call or text 988 (Suicide & Crisis Lifeline), in the UK "
    "and Ireland call Samaritans on 116 123, or find a helpline in your country at "
    "findahelpline.com. Our Employee Assistance Programme offers free, confidential "
    "counselling, and HR or a mental health first aider can help you get support at work. "
    "If you'd like, tell me a bit more about what's going on and I'll listen."
)

# Shown before an answer that is given (a caution-level message leaning towards self-harm):
# it may well be a nurse's question or a grieving colleague's, so it offers, not presumes.
SELF_HARM_RESOURCES = (
    "If any of this is about how you're feeling yourself, you don't have to handle it alone: "
    "in the US call or text 988, in the UK and Ireland call Samaritans on 116 123, elsewhere "
    "find a helpline at findahelpline.com, or call your local emergency number if you are in "
    "danger. Our Employee Assistance Programme offers free, confidential counselling."
)

_REFUSALS = {
    "prompt_injection": "I can't change or reveal my instructions, but I'm happy to help with "
    "your actual question.",
    "violence_weapons": "I can't help with anything that could hurt people. If someone is in "
    "danger, please contact emergency services or Security.",
    "harassment_hate": "I can't help write content that demeans or targets people. If you're "
    "dealing with a conflict at work, I can help you raise it constructively or explain the "
    "harassment policy.",
    "sexual": "I can't help with sexual content. If this is about conduct at work, I can "
    "explain the relevant policy and how to report a concern.",
    "privacy": "I can't share other people's personal information. I can point you to the "
    "published policies or the right team to ask.",
    "fraud": "I can't help with that, as it would get around our financial controls. I can "
    "explain the correct process or who can approve an exception.",
    "malicious_code": "I can't help build tools meant to attack systems or steal data. I can "
    "help with defensive security or point you to the security team.",
}

OUTPUT_STOPPED = (
    "I stopped this answer because it was heading somewhere I can't go. Please rephrase your "
    "question, or ask me something else."
)


def refusal(category: str) -> str:
    if category == "self_harm":
        return SELF_HARM_SUPPORT
    return _REFUSALS.get(category, "I can't help with that request.")
