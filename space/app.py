"""The QueerBench demo Space (Gradio). All logic lives in the library: :mod:`queerbench.space_app`."""

from queerbench.space_app import build_demo, launch_kwargs

demo = build_demo()

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
