"""A real HTTP upstream that speaks the OpenAI and Anthropic wires, for tests and the demo.

Scripted mode (steps loaded over `POST /_sim/script`) fails loudly on any unexpected
request; without a script a deterministic demo policy answers. Prompt-cache accounting,
context overflow and fault injection follow the real providers' wire shapes.
"""
