"""The models the engine runs, through core/model_api.py's NativeModel: MiniMax M3 (text), its
vision tower, and the Llama-style check model."""
