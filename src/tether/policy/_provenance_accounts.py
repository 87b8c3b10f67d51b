"""Accounts that are not written as one token of the IBAN shape: an IBAN printed in pieces
(``spread_accounts``), the addresses of crypto-currency wallets (``find_wallets``) and payment
addresses of the UPI shape (``find_payment_addresses``), which a reader pays as surely as an
IBAN. ``provenance_values.find_handles`` reports them all as handles."""

from __future__ import annotations

import re

_WHITE = r"[ \t\r\n]"  # what ``normalise`` reads as one space, in runs

# The length of an IBAN in each country that issues them (the SWIFT registry).
_IBAN_COUNTRIES = (
    "ad24 ae23 al28 at20 az28 ba20 be16 bg22 bh22 br29 by28 ch21 cr22 cy28 cz24 de22 dk18 do28 ee20 "
    "eg29 es24 fi18 fo18 fr27 gb22 ge22 gi23 gl18 gr27 gt28 hr21 hu28 ie22 il23 iq23 is26 it27 jo30 "
    "kw30 kz20 lb28 lc32 li21 lt20 lu20 lv21 ly25 mc27 md24 me22 mk19 mr27 mt31 mu30 nl18 no15 pk24 "
    "pl28 ps29 pt25 qa29 ro24 rs22 sa24 sc31 sd18 se24 si19 sk24 sm27 st25 sv28 tl23 tn24 tr26 ua29 "
    "va22 vg24 xk20"
)
_IBAN_LENGTH = {entry[:2]: int(entry[2:]) for entry in _IBAN_COUNTRIES.split()}
_CHUNK = re.compile(r"[a-z0-9]+")
# What may part two pieces of one account: "." "/" " - ", spaces however many, a line break.
_SPREAD_GAP = re.compile(rf"{_WHITE}*(?:[^\w\s@]{_WHITE}*){{0,2}}|_")


def spread_accounts(folded: str) -> list[str]:
    """IBANs ``folded`` prints in pieces however they are parted (``GB29.NWBK.6016…``,
    ``GB 29 NWBK 6016…``, ``GB29NWBK 60161331926819``): runs of letters and digits, each parted
    from the next by one or two marks or spaces on one line, that joined from the start of one
    piece to the end of another make an account of its country's length whose check digits
    hold (ISO 13616, mod 97). Only a valid account is one: a sentence's words seldom are."""
    chunks = list(_CHUNK.finditer(folded))
    out: list[str] = []
    for i, first in enumerate(chunks):
        joined = first.group(0)
        length = _IBAN_LENGTH.get(joined[:2])
        if length is None and len(joined) == 2 and i + 1 < len(chunks):
            length = _IBAN_LENGTH.get(joined)
        if length is None:
            continue
        for prev, chunk in zip(chunks[i:], chunks[i + 1 :], strict=False):
            if len(joined) >= length or not _SPREAD_GAP.fullmatch(folded, prev.end(), chunk.start()):
                break
            joined += chunk.group(0)
        if len(joined) == length and _valid_iban(joined) and joined not in out:
            out.append(joined)
    return out


def _valid_iban(account: str) -> bool:
    """Whether ``account`` (lower case, no spaces) has the shape of an IBAN and its check digits
    hold: moved four characters to the end, its letters as 10…35, the number is 1 modulo 97."""
    if not re.fullmatch(r"[a-z]{2}\d{2}[a-z0-9]+", account):
        return False
    moved = account[4:] + account[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


# Wallet addresses, set apart from other letters and digits (and from the marks base64 holds):
# an EVM account (``0x`` and 40 hex digits), a bech32 address (``bc1q…``: a prefix, the
# separator ``1``, 25 or more characters of its alphabet, in one case) and a base58 address
# (bitcoin's ``1…``/``3…``, Solana's, Tron's ``T…``, Monero's: 26 to 110 characters of the
# base58 alphabet, upper and lower case and digits mixed).
_EVM = re.compile(r"(?<![0-9a-z])0x[0-9a-f]{40}(?![0-9a-z])", re.IGNORECASE)
_BECH32 = re.compile(r"(?<![0-9a-z])[a-z]{1,10}1[02-9ac-hj-np-z]{25,110}(?![0-9a-z])", re.IGNORECASE)
_BASE58 = re.compile(r"(?<![0-9A-Za-z+/=])[1-9A-HJ-NP-Za-km-z]{26,110}(?![0-9A-Za-z+/=])")


def find_wallets(text: str) -> list[str]:
    """The crypto-currency wallet addresses in ``text`` (NFKC, case kept), case folded as the
    other handles are: a party a payment reaches, however it is not an IBAN. A base58 address
    needs a digit and letters of both cases; a bech32 one a digit in its data and one case."""
    out: list[str] = []
    for m in _EVM.finditer(text):
        out.append(m.group(0).lower())
    for m in _BECH32.finditer(text):
        raw = m.group(0)
        if (raw.islower() or raw.isupper()) and any(c.isdigit() for c in raw.rsplit("1", 1)[1]):
            out.append(raw.lower())
    for m in _BASE58.finditer(text):
        v = m.group(0)
        if any(c.isdigit() for c in v) and any(c.islower() for c in v) and any(c.isupper() for c in v):
            out.append(v.lower())
    return list(dict.fromkeys(out))


# A payment address of the UPI shape (``name@bank``): a handle at a provider whose name has no
# dot, which no e-mail address in a public domain is (one whose domain goes on is ``_EMAIL``'s).
_PAYMENT_ADDRESS = re.compile(r"(?<![\w.+@-])[\w.+-]{2,256}@[a-z][a-z0-9]{1,63}(?![\w@-])(?!\.[\w-])")


def find_payment_addresses(folded: str) -> list[str]:
    """The payment addresses of the UPI shape in ``folded`` (unfolded, case folded):
    ``mallory@ybl`` is paid as an account number is, though no e-mail address."""
    return list(dict.fromkeys(m.group(0) for m in _PAYMENT_ADDRESS.finditer(folded)))
