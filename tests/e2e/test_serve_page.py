"""The page of `textnn serve` at `/`, in a real headless browser (Debian's chromium through selenium).

Tiny runs are trained by the real CLI (a BERT classifier, a tagger, a Transformer translator, a character
LSTM language model), `python -m textnn serve` runs on a free port, and the page is used as a person
uses it: pick a run, type, press the button. What it draws is compared with what the API answers for the
same input: the classifier's probability bars, the tagger's spans, the translator's n-best list and its
attention heatmap (one cell per target x source token), generated text streamed into the page (equal to
the API's text for the same seed), BERT's attention per layer and head, and the LSTM cell view.

Each test keeps a screenshot: in its temporary folder, or in the folder TEXTNN_SCREENSHOTS names
(`TEXTNN_SCREENSHOTS=docs/img` writes README's pictures, docs/img/serve_*.png; the runs then train longer,
so that the pictures show models that have learnt something).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_generate_cli import write_text
from tests.e2e.test_serve import CONFIGS, TRAIN, Server, Workspace
from tests.e2e.test_tagging_cli import write_toy_ner
from tests.e2e.test_translation_cli import write_corpus

BROWSER, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (BROWSER and DRIVER):
    pytest.skip("the page test needs Debian's chromium and chromium-driver (apt-get install chromium "
                "chromium-driver); not found on PATH", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="the page test needs selenium (pip install selenium)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

WAIT = 120  # seconds the page may take to show an answer (a bound that only keeps a failure from hanging)
WIDTH = 1000  # pixels: the screenshots' width
# each run's training: a few steps, or for README's pictures enough to have learnt something
TRAINING = ["train.max_steps=400", "train.epochs=400"] if os.environ.get("TEXTNN_SCREENSHOTS") else ["train.max_steps=25"]
PAGE_CONFIGS = {
    "bert_cls": "task: classification\ndata: {train: train.tsv, dev: dev.tsv, wordpiece_vocab_size: 80, "
                "max_length: 24}\nmodel: {name: bert, preset: tiny}\n",
    "ner": CONFIGS["ner"],
    "mt": CONFIGS["mt"].replace("seq2seq", "transformer_mt"),
    "char_lstm": "task: language_modeling\ndata: {format: text, train: lm_train.txt, dev: lm_dev.txt, tokenizer: char, "
                 "bptt: 16}\nmodel: {name: rnn_lm, preset: tiny, cell: lstm}\n",
}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("page"))


@pytest.fixture(scope="module")
def server(ws):
    root = ws.root
    write_sentiment_tsv(root / "train.tsv", 120, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 30, seed=2)
    write_toy_ner(root / "ner_train.conll", 60, seed=1)
    write_toy_ner(root / "ner_dev.conll", 20, seed=2)
    write_corpus(root, "mt_train", 150, seed=1)
    write_corpus(root, "mt_dev", 20, seed=2)
    write_text(root / "lm_train.txt", 150, seed=1)
    write_text(root / "lm_dev.txt", 30, seed=2)
    for name, config in PAGE_CONFIGS.items():
        (root / f"{name}.yaml").write_text(config + TRAIN, encoding="utf-8")
        ws.output("train", f"{name}.yaml", "--run-dir", f"runs/{name}", *TRAINING)
    serving = Server(ws, [f"runs/{name}" for name in PAGE_CONFIGS])
    yield serving
    assert serving.stop() == 0, serving.errors()


@pytest.fixture(scope="module")
def browser(server):
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={WIDTH},900", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    driver.get(f"http://127.0.0.1:{server.port}/")
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    yield driver
    driver.quit()


def wait(driver, condition):
    return WebDriverWait(driver, WAIT).until(condition)


def screenshot(driver, tmp_path: Path, name: str) -> None:
    """The whole page, WIDTH pixels wide (at most 2400 high), as serve_NAME.png."""
    folder = Path(os.environ.get("TEXTNN_SCREENSHOTS") or tmp_path)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # the viewport itself, not the window around it
                           {"width": WIDTH, "height": min(height, 2400), "deviceScaleFactor": 1, "mobile": False})
    folder.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(folder / f"serve_{name}.png"))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def ask(driver, run: str, text: str, button: str = "send", **fields) -> None:
    """Pick `run`, type `text` (and the decoding `fields`, by their input's id), press `button`."""
    Select(driver.find_element(By.ID, "run")).select_by_value(run)
    for field_id, value in {"input": text, **fields}.items():
        box = driver.find_element(By.ID, field_id)
        box.clear()
        box.send_keys(str(value))
    driver.find_element(By.ID, button).click()


def answered(driver) -> None:
    wait(driver, lambda d: d.find_element(By.ID, "status").text == "Done." or d.find_element(By.ID, "error").text)
    assert driver.find_element(By.ID, "error").text == ""


def test_the_page_loads_lists_the_runs_and_asks_only_its_own_api(server, browser):
    options = [option.get_attribute("value") for option in browser.find_elements(By.CSS_SELECTOR, "#run option")]
    assert options == list(PAGE_CONFIGS) == [run["name"] for run in json.loads(server.get("/v1/runs"))["runs"]]
    assert browser.find_element(By.CSS_SELECTOR, "label[for=input]").text == "Text"
    ask(browser, "bert_cls", "good film")
    answered(browser)
    requested = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert requested, "the page sent no request"
    for url in requested:  # nothing from another host, nothing but the API
        parsed = urlparse(url)
        assert (parsed.hostname, parsed.port) == ("127.0.0.1", server.port) and parsed.path.startswith("/v1/runs"), url


def test_classification_shows_the_probabilities_as_bars(server, browser, tmp_path):
    texts = ["good great film", "awful dull plot and the movie"]
    ask(browser, "bert_cls", "\n".join(texts))
    answered(browser)
    expected = server.post("/v1/runs/bert_cls/predict", {"inputs": texts})["predictions"]
    shown = browser.find_elements(By.CSS_SELECTOR, "#answer .prediction")
    assert len(shown) == len(expected)
    for prediction, block in zip(expected, shown):
        bars = {bar.get_attribute("data-label"): float(bar.get_attribute("data-p"))
                for bar in block.find_elements(By.CSS_SELECTOR, ".bar")}
        assert bars == prediction["probabilities"]
        assert block.find_element(By.CSS_SELECTOR, ".bar.top").get_attribute("data-label") == prediction["label"]
    screenshot(browser, tmp_path, "classification")


def test_tagging_highlights_each_span_with_its_type(server, browser, tmp_path):
    text = "John Smith visited Paris on monday ."
    ask(browser, "ner", text)
    answered(browser)
    spans = server.post("/v1/runs/ner/predict", {"inputs": [text]})["predictions"][0]["spans"]
    marks = browser.find_elements(By.CSS_SELECTOR, "#answer mark.span")
    shown = [(mark.get_attribute("data-type"), mark.text.rsplit(mark.get_attribute("data-type"), 1)[0].strip())
             for mark in marks]
    assert shown == [(span["type"], span["text"]) for span in spans]
    screenshot(browser, tmp_path, "tagging")


def test_translation_shows_the_n_best_list_and_the_attention_heatmap(ws, server, browser, tmp_path):
    source = (ws.root / "mt_dev.de").read_text(encoding="utf-8").splitlines()[0]
    ask(browser, "mt", source, beam=3, **{"n-best": 2})
    answered(browser)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell"))
    translated = server.post("/v1/runs/mt/translate", {"inputs": [source], "beam_size": 3, "n_best": 2})
    hypotheses = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#nbest .hypothesis")]
    assert hypotheses == translated["predictions"][0]["hypotheses"] and len(hypotheses) == 2
    inside = server.post("/v1/runs/mt/inspect", {"input": source})
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
    assert len(cells) == len(inside["target"]) * len(inside["source"])
    assert [float(cell.get_attribute("data-p")) for cell in cells] == \
        [p for row in inside["attention"][0][0] for p in row]
    layers = [option.text for option in browser.find_elements(By.CSS_SELECTOR, "#layer option")]
    assert layers == inside["layers"] and len(browser.find_elements(By.CSS_SELECTOR, "#head option")) == 2
    screenshot(browser, tmp_path, "translation")


def test_generation_streams_the_text_the_api_gives_for_the_same_seed(server, browser, tmp_path):
    ask(browser, "char_lstm", "the cat", **{"seed": 7, "max-tokens": 60})
    answered(browser)
    output = browser.find_element(By.ID, "generated")
    assert output.get_attribute("data-done") == "true"
    expected = server.post("/v1/runs/char_lstm/generate", {"prompt": "the cat", "seed": 7, "max_tokens": 60})
    assert browser.execute_script("return document.getElementById('generated').textContent") == expected["text"]
    screenshot(browser, tmp_path, "generation")


def test_bert_attention_per_layer_and_head(server, browser, tmp_path):
    text = "good great film"
    ask(browser, "bert_cls", text, button="inspect")
    answered(browser)
    inside = server.post("/v1/runs/bert_cls/inspect", {"input": text})
    assert inside["kind"] == "self_attention"
    tokens, heads = len(inside["tokens"]), len(inside["attention"][0])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#layer option")) == len(inside["attention"])
    Select(browser.find_element(By.ID, "layer")).select_by_index(1)
    Select(browser.find_element(By.ID, "head")).select_by_index(heads - 1)
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
    assert len(cells) == tokens * tokens
    assert [float(cell.get_attribute("data-p")) for cell in cells] == \
        [p for row in inside["attention"][1][heads - 1] for p in row]
    screenshot(browser, tmp_path, "bert_attention")


def test_char_lstm_cells_colour_the_text(server, browser, tmp_path):
    text = 'def f(x):\n    return "the cat" + x  # sat\n'
    ask(browser, "char_lstm", text, button="inspect")
    answered(browser)
    inside = server.post("/v1/runs/char_lstm/inspect", {"input": text})
    options = [option.text for option in browser.find_elements(By.CSS_SELECTOR, "#cell option")]
    assert options == [cell["label"] for cell in inside["cells"]]
    Select(browser.find_element(By.ID, "cell")).select_by_index(1)
    characters = browser.find_elements(By.CSS_SELECTOR, "#cell-text .ch")
    assert len(characters) == len(inside["text"])
    assert [float(ch.get_attribute("data-v")) for ch in characters] == inside["cells"][1]["values"]
    screenshot(browser, tmp_path, "lstm_cells")


def test_a_run_with_nothing_to_show_is_400_naming_what_is_needed(server):
    got, _, body = server.request("POST", "/v1/runs/ner/inspect", {"input": "John met Anna ."})
    assert got == 400 and "LSTM language model" in json.loads(body)["error"]["message"]
    got, _, body = server.request("POST", "/v1/runs/nobody/inspect", {"input": "x"})
    assert got == 404
    got, _, body = server.request("POST", "/v1/runs/bert_cls/inspect", {"text": "x"})
    assert got == 422 and json.loads(body)["error"]["param"] == "text"
    got, _, body = server.request("POST", "/v1/runs/bert_cls/inspect", {"input": "good " * 200})  # past its positions
    assert got == 413 and "attention maps are drawn for at most" in json.loads(body)["error"]["message"]
