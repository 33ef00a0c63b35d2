"""The training panel: run an AMP job in a child process and watch its numerics live.

Qt-free parts (run_model, job_state, code_snippet) are tested without a GUI; the GUI
parts never import torch (the job runs in `fpexplorer train --stream`).
"""
