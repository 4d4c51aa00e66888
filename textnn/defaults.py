"""What the commands that use a trained run do when not told otherwise.

The command line (cli.py) and the Python API (api.py) both read these values, so `textnn generate RUN
--prompt P` and `textnn.load(RUN).generate(P)` decode alike, and `textnn evaluate` and `Run.evaluate`
give the same metrics. No torch here: the command line reads them to build its help.
"""

DEVICE = "auto"  # where the model runs: cuda when a GPU is available, else cpu
BOOTSTRAP_SAMPLES = 1000  # evaluate: resamples behind the 95% bootstrap interval (0 = no interval)
# generate: draw each token (a seed drawn from the operating system when none is given), 200 new tokens,
# and run on past line ends: a character model's end of sequence is a newline, so stopping there would
# often give back the prompt alone.
GENERATE = {"method": "sample", "max_tokens": 200, "stop_at_eos": False}
