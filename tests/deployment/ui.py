"""Airflow 3.3's UI as an operator uses it, through Selenium: sign in, fill and submit a DAG's Trigger
form, answer a Required action, open a DAG run's plugin tab. Selectors are what the UI shows (labels,
button text, link text) or Airflow's own ``data-testid`` and ``element_<param>`` names; every wait is
an explicit ``WebDriverWait`` that names what it waited for."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

# The api-server of `airflow standalone` answers slowly on two busy cores: pages get a minute.
PAGE_TIMEOUT_S = 90.0


def xpath_literal(text: str) -> str:
    """``text`` as an XPath string literal (XPath 1.0 has no escapes)."""
    if "'" not in text:
        return f"'{text}'"
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


class AirflowUI:
    """One signed-in browser on one Airflow; ``shot`` numbers its screenshots in ``artifacts``."""

    def __init__(self, driver: WebDriver, url: str, artifacts: Path) -> None:
        self.driver, self.url, self.artifacts = driver, url.rstrip("/"), artifacts
        self.shots: list[Path] = []

    # -- basics -------------------------------------------------------------------------------------------

    def wait(self, condition: Callable[[WebDriver], Any], what: str, timeout: float = PAGE_TIMEOUT_S) -> Any:
        """``condition``'s first truthy value; fail naming ``what``, the page and a screenshot otherwise."""
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.5,
                                 ignored_exceptions=(StaleElementReferenceException,)).until(condition)
        except TimeoutException:
            shot = self.shot(f"timeout-{re.sub(r'[^a-z0-9]+', '-', what.lower())[:40]}")
            pytest.fail(f"waited {timeout:.0f} s for {what} at {self.driver.current_url}; screenshot {shot}; "
                        f"the page says:\n{self.visible_text()[-1500:]}")

    def shot(self, name: str) -> Path:
        path = self.artifacts / f"{len(self.shots) + 1:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        self.shots.append(path)
        return path

    def visible_text(self) -> str:
        try:
            return self.driver.find_element(By.TAG_NAME, "body").text
        except WebDriverException as err:
            return f"(no text: {err})"

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def park(self) -> None:
        """Leave Airflow for a blank page while the test waits on the REST API: an open run page
        refreshes itself every few seconds, and rendering it cost headless Chromium more CPU than the
        rest of the path (264 s of the two cores in one run)."""
        self.driver.switch_to.default_content()
        self.driver.get("about:blank")

    def text_shown(self, text: str, timeout: float = PAGE_TIMEOUT_S) -> WebElement:
        """The innermost visible element whose text contains ``text``."""
        xpath = f"//*[contains(normalize-space(.), {xpath_literal(text)}) and not(*[contains(normalize-space(.), " \
                f"{xpath_literal(text)})])]"
        return self.wait(lambda d: next((e for e in d.find_elements(By.XPATH, xpath) if e.is_displayed()), None),
                         f"the text {text!r}", timeout)

    def button(self, label: str, timeout: float = PAGE_TIMEOUT_S) -> WebElement:
        """A visible, enabled button whose text is ``label``."""
        xpath = f"//button[normalize-space(.)={xpath_literal(label)}]"
        return self.wait(lambda d: next((b for b in d.find_elements(By.XPATH, xpath)
                                         if b.is_displayed() and b.is_enabled()), None),
                         f"an enabled {label!r} button", timeout)

    def click(self, element: WebElement) -> None:
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()

    # -- sign in ------------------------------------------------------------------------------------------

    def login(self, user: str, password: str) -> None:
        """Sign in through the auth manager's own form; land on Airflow's home page."""
        self.open("/")
        field = self.wait(EC.visibility_of_element_located((By.NAME, "username")), "the sign-in form")
        field.send_keys(user)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.shot("sign-in")
        self.click(self.button("Sign in"))
        self.wait(lambda d: "/auth/login" not in d.current_url and d.find_elements(By.LINK_TEXT, "Dags"),
                  "the home page after signing in")

    def login_fab(self, user: str, password: str) -> None:
        """Sign in through the FAB auth manager's page (``/auth/login/``, Flask-AppBuilder's form, sent with
        Enter as an operator does); land on Airflow's home page."""
        self.open("/")
        self.wait(lambda d: "/auth/login" in d.current_url, "the redirect to FAB's sign-in page")
        field = self.wait(EC.visibility_of_element_located((By.NAME, "username")), "FAB's sign-in form")
        field.send_keys(user)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.shot("fab-sign-in")
        self.driver.find_element(By.NAME, "password").send_keys(Keys.ENTER)
        self.wait(lambda d: "/auth/login" not in d.current_url and d.find_elements(By.LINK_TEXT, "Dags"),
                  "the home page after signing in on FAB's page")

    def sign_in_as(self, user: str, password: str) -> None:
        """Sign out (the session's cookies and the page's storage dropped) and sign in as ``user``: the
        four-eyes rule wants the approver to be another user than the one who triggered the run."""
        self.driver.switch_to.default_content()
        self.open("/")
        self.driver.delete_all_cookies()
        self.driver.execute_script("window.localStorage.clear(); window.sessionStorage.clear();")
        self.login(user, password)

    # -- the Trigger form ---------------------------------------------------------------------------------

    def trigger(self, dag_id: str, *, choices: Mapping[str, str] = {}, switches: Mapping[str, bool] = {},
                arrays: Mapping[str, Sequence[Any]] = {}, texts: Mapping[str, str] = {}, name: str = "",
                show: Sequence[str] = ()) -> str:
        """Open ``dag_id``'s Trigger form, keep every default but the given params, submit it; the run id.

        ``choices``: enum params (a drop-down); ``switches``: boolean params; ``arrays``: array params,
        typed one value a line or, where Airflow shows a JSON editor, as JSON; ``texts``: text and number
        fields, typed over what they hold; ``show``: params further down the form to scroll to and screenshot
        (each must be on the form)."""
        self.open(f"/dags/{dag_id}")
        self.click(self.wait(EC.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-button]")),
                             f"the Trigger button of {dag_id}"))
        self.wait(EC.visibility_of_element_located((By.XPATH, f"//h2[contains(., 'Trigger Dag') and "
                                                             f"contains(., {xpath_literal(dag_id)})]")),
                  f"the Trigger form of {dag_id}")
        self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, "[role=dialog] [name^=element_]")),
                  f"the params of {dag_id}")
        for param, choice in choices.items():
            self.set_choice(param, choice)
        for param, value in switches.items():
            self.set_switch(param, value)
        for param, values in arrays.items():
            if self.driver.find_elements(By.CSS_SELECTOR, f"textarea[name=element_{param}]"):
                self.set_lines(param, [str(v) for v in values])
            else:
                self.set_json(param, list(values))
        for param, text in texts.items():
            self.set_text(param, text)
        self.shot(f"{name or dag_id}-trigger-form")
        for param in show:
            field = self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f"[role=dialog] [name=element_{param}]")),
                              f"the param {param} on {dag_id}'s Trigger form")
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", field)
            self.shot(f"{name or dag_id}-trigger-form-{param.replace('_', '-')}")
        given = {**choices, **switches, **arrays, **texts}
        submit = self.driver.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", submit)
        if not submit.is_enabled():
            shot = self.shot(f"{name or dag_id}-trigger-disabled")
            pytest.fail(f"the Trigger button of {dag_id}'s form is disabled with its defaults plus {given}; fields the form marks: {self.marked_fields()}; "
                        f"screenshot {shot}")
        submit.click()
        pattern = re.compile(rf"/dags/{re.escape(dag_id)}/runs/([^/?#]+)")
        found = self.wait(lambda d: pattern.search(d.current_url), f"the page of the new {dag_id} run")
        run_id = unquote(found.group(1))
        self.shot(f"{name or dag_id}-triggered")
        return run_id

    def marked_fields(self) -> list[str]:
        """The Trigger form's params that hold it back: marked invalid, or required and left empty."""
        marked = self.driver.execute_script("""
            const rows = [...document.querySelectorAll('[role=dialog] [data-scope=field][data-part=root]')];
            const empty = r => [...r.querySelectorAll('input[required],textarea[required]')]
                .some(i => !['checkbox', 'hidden', 'radio'].includes(i.type) && i.value === '');
            return rows.filter(r => r.matches('[data-invalid]') || r.querySelector('[data-invalid],[aria-invalid=true]')
                                    || empty(r))
                       .map(r => (r.querySelector('label') || r).innerText.replace(/[\\s*]+/g, ' ').trim());
        """)
        return list(marked or [])

    def set_choice(self, param: str, choice: str) -> None:
        """Pick ``choice`` in the param's drop-down (type it into the combobox, take the first match)."""
        hidden = self.wait(EC.presence_of_element_located((By.NAME, f"element_{param}")), f"the {param} drop-down")
        row = hidden.find_element(By.XPATH, "ancestor::*[@data-scope='field' and @data-part='root'][1]")
        box = row.find_element(By.CSS_SELECTOR, "input[role=combobox]")
        self.click(box)
        box.send_keys(choice)
        box.send_keys(Keys.ENTER)
        self.wait(lambda d: d.find_element(By.NAME, f"element_{param}").get_attribute("value") == choice,
                  f"{param} set to {choice!r}", 10)

    def set_switch(self, param: str, on: bool) -> None:
        box = self.wait(EC.presence_of_element_located((By.NAME, f"element_{param}")), f"the {param} switch")
        if box.is_selected() != on:
            self.click(box.find_element(By.XPATH, "ancestor::label[@data-scope='switch']"))
        self.wait(lambda d: d.find_element(By.NAME, f"element_{param}").is_selected() == on,
                  f"the {param} switch {'on' if on else 'off'}", 10)

    def _replace(self, tag: str, param: str, text: str) -> None:
        """Select all of the param's ``tag`` field (input, textarea) and type ``text`` over it."""
        field = self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f"{tag}[name=element_{param}]")),
                          f"the {param} {tag}")
        self.click(field)
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(Keys.DELETE)
        field.send_keys(text)
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, f"{tag}[name=element_{param}]").get_attribute("value")
                  == text, f"{param} set to {text!r}", 10)

    def set_text(self, param: str, text: str) -> None:
        self._replace("input", param, text)

    def set_lines(self, param: str, values: Sequence[str]) -> None:
        self._replace("textarea", param, "\n".join(values))

    def set_json(self, param: str, value: Any) -> None:
        """Type ``value`` into the param's JSON editor (Monaco) as an operator would, and check what it holds."""
        import json

        editor = self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f"#element_{param} .view-lines")),
                           f"the JSON editor of {param}", 10)
        self.click(editor)
        typing = ActionChains(self.driver)
        typing.key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).send_keys(Keys.DELETE)
        typing.send_keys(json.dumps(value)).perform()
        held = self.driver.find_element(By.CSS_SELECTOR, f"#element_{param} .view-lines").text.replace("\xa0", " ")
        try:
            ok = json.loads(held) == value
        except ValueError:
            ok = False
        if not ok:
            shot = self.shot(f"json-editor-{param}")
            pytest.fail(f"typed {json.dumps(value)} into the JSON editor of {param}, which now holds {held!r}; "
                        f"screenshot {shot}")

    def param_row(self, param: str) -> WebElement:
        """The Trigger form's row of ``param`` (its label, field and description)."""
        anchor = self.wait(lambda d: next(iter(d.find_elements(By.CSS_SELECTOR,
                                                               f"[name=element_{param}],[id$=element_{param}]")),
                                          None), f"the {param} field", 10)
        return anchor.find_element(By.XPATH, "ancestor::*[@data-scope='field' and @data-part='root'][1]")

    # -- Required actions ---------------------------------------------------------------------------------

    def open_required_action(self, dag_id: str, run_id: str, timeout: float, task_id: str = "") -> str:
        """Browse > Required Actions, the one of this run (of its ``task_id``, when the run has several);
        its visible text once it shows a response."""
        xpath = f"//a[contains(@href, {xpath_literal(f'/dags/{dag_id}/runs/{run_id}/tasks/{task_id}')}) " \
                f"and contains(@href, '/required_actions')]"

        def listed(driver: WebDriver) -> WebElement | None:
            found = [a for a in driver.find_elements(By.XPATH, xpath) if a.is_displayed()]
            if not found:
                driver.refresh()  # the list does not update itself
            return found[0] if found else None

        self.open("/required_actions")
        self.click(self.wait(listed, f"a required action of {dag_id} run {run_id} in Browse > Required Actions",
                             timeout))
        self.button("Approve")
        return self.visible_text()

    def respond(self, option: str) -> None:
        """Press ``option`` on the open required action; wait until Airflow took the answer."""
        button = self.button(option)
        self.click(button)
        self.wait(lambda d: not any(b.is_displayed() and b.is_enabled() for b in
                                    d.find_elements(By.XPATH, f"//button[normalize-space(.)={xpath_literal(option)}]")),
                  f"Airflow to take the answer {option!r} (the form's buttons disabled)")

    # -- a run's plugin tab -------------------------------------------------------------------------------

    def open_run_tab(self, dag_id: str, run_id: str, tab: str) -> None:
        """The run's page, then its ``tab``; for a plugin tab, switch into its frame."""
        self.driver.switch_to.default_content()
        self.open(f"/dags/{dag_id}/runs/{run_id}")
        self.click(self.wait(EC.element_to_be_clickable((By.LINK_TEXT, tab)), f"the {tab!r} tab of run {run_id}"))
        frame = self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f"iframe[title={xpath_literal(tab)}]")),
                          f"the frame of the {tab!r} tab")
        self.driver.switch_to.frame(frame)
