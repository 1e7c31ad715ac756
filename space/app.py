"""The QueerBench demo Space (Gradio). All logic lives in the library: :mod:`queerbench.hub.space`."""

from queerbench.hub.space import build_demo, launch_kwargs

demo = build_demo()

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
