"""The person on another device, for the device grant against oidc-provider:
opens the verification address, enters the user code, confirms, signs in on
oidc-provider's development sign-in page and consents, submitting each page's
form as a browser would (cookies kept, redirects followed).

    oidc_person.py VERIFICATION_URI USER_CODE

Exits 0 once oidc-provider says the sign-in succeeded; prints the pages it
saw otherwise.
"""

import sys
from html.parser import HTMLParser
from urllib.parse import urljoin

import httpx


class Forms(HTMLParser):
    """The forms of a page: action, method and inputs (name, value)."""

    def __init__(self):
        super().__init__()
        self.forms = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"id": attrs.get("id", ""), "action": attrs.get("action", ""), "inputs": {}})
        elif tag == "input" and self.forms and attrs.get("name"):
            self.forms[-1]["inputs"][attrs["name"]] = attrs.get("value", "")


def main():
    uri, code = sys.argv[1], sys.argv[2]
    seen = []
    with httpx.Client(follow_redirects=True, timeout=20) as browser:
        page = browser.get(uri)
        for _ in range(10):
            seen.append(page.text)
            if "Sign-in Success" in page.text:
                return 0
            parser = Forms()
            parser.feed(page.text)
            forms = [form for form in parser.forms if "abort" not in form["id"].lower() and "abort" not in form["action"]]
            if not forms:
                break
            form = forms[0]
            fields = dict(form["inputs"])
            if "user_code" in fields and not fields["user_code"]:
                fields["user_code"] = code
            if "login" in fields:
                fields["login"] = "alice"
                fields["password"] = "anything"
            page = browser.post(urljoin(str(page.url), form["action"]), data=fields)
    sys.stdout.write("\n---\n".join(seen))
    return 1


sys.exit(main())
