"""MiniMax M3's own formats, shared by every backend (SPEC §4, §4.8).

tokens.py (marker strings), tokenizer.py (M3Tokenizer),
build_tokenizer.py (the bundled tokenizer), chat_template.py (messages -> prompt),
reasoning_parser.py + tool_parser.py + xml_args.py + schema_coerce.py (model text -> deltas),
output_parser.py (M3OutputParser, parse_output). Nothing is imported here: importing the
package stays free of side effects and heavy dependencies.
"""
