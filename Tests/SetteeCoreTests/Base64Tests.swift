import SetteeCore
import Testing

/// `Base64` is the project's one base64 (issue 69: it replaced Foundation's `Data(base64Encoded:)` in Sources). These
/// tests pin each decoding rule to the behaviour its call sites had with Foundation, and record the malformed inputs
/// on which Foundation and the RFC disagree, where the RFC's answer (refuse) was kept.
@Suite struct Base64Tests {
    /// Encoding pads to a multiple of 4, as Foundation's `base64EncodedString()` did (RFC 4648 §10's vectors).
    @Test(arguments: [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ])
    func encodesTheRFCVectors(_ plain: String, _ encoded: String) {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
        for rule in [Base64.Decoding.lenient, .strict, .skippingUnknown] {
            #expect(Base64.decode(encoded, rule) == Array(plain.utf8))
        }
    }

    /// Every byte value survives the round trip, under every rule.
    @Test func roundTripsEveryByte() {
        let bytes = (0...255).map { UInt8($0) }
        for n in [0, 1, 2, 3, 254, 255, 256] {
            for rule in [Base64.Decoding.lenient, .strict, .skippingUnknown] {
                #expect(Base64.decode(Base64.encode(Array(bytes.prefix(n))), rule) == Array(bytes.prefix(n)))
            }
        }
    }

    /// `.strict` refuses what Foundation's `Data(base64Encoded:)` refused (SCRAM, stored keys, `_attachments.data`
    /// on the gateway's and Lite's writes): missing padding, whitespace, base64url, a dangling digit, anything after
    /// the padding. It accepts non-zero bits below the last byte, as Foundation did.
    @Test(arguments: [
        "QQ", "QQ=", "QUJ", "Q Q==", "QQ==\n", "\nQQ==", "QU\r\nJD", "-_-_", "=", "==", "Q===", "Q", "QUJDR",
        "QUJDRA", "QUJDRA=", "QUJD*", "QUJD\u{0}", "é", "QQ==QQ==", "QQ==QUJD", "Q=Q=", "=QQ=",
    ])
    func strictRefusesWhatFoundationRefused(_ text: String) {
        #expect(Base64.decode(text, .strict) == nil)
    }

    @Test func strictAcceptsWhatFoundationAccepted() {
        #expect(Base64.decode("QR==", .strict) == [65])
        #expect(Base64.decode("QUJ=", .strict) == [65, 66])
        #expect(Base64.decode("+/+/", .strict) == [251, 255, 191])
        #expect(Base64.decode("", .strict) == [])
    }

    /// Where the two base64s disagreed: Foundation accepted these malformed paddings (`====` even as one zero
    /// byte, `QU=D` as two bytes). RFC 4648 §3.3 says to refuse them; every rule but `.lenient` now does, so a
    /// SCRAM proof or an attachment with a broken tail is an error rather than other bytes.
    @Test(arguments: ["====", "QU=D", "QUJD=", "QUJD====", "QUI==", "QQ==="])
    func malformedPaddingFoundationAcceptedIsRefused(_ text: String) {
        #expect(Base64.decode(text, .strict) == nil)
        #expect(Base64.decode(text, .skippingUnknown) == nil)
    }

    /// `.skippingUnknown` (Foundation's `.ignoreUnknownCharacters`, which inline attachment `data` was read with)
    /// passes over whitespace, base64url's characters and any other byte, then reads the rest strictly.
    @Test func skippingUnknownPassesOverOtherCharacters() {
        #expect(Base64.decode("QU JD", .skippingUnknown) == [65, 66, 67])
        #expect(Base64.decode("QU\r\nJD", .skippingUnknown) == [65, 66, 67])
        #expect(Base64.decode("*QUJD\u{0}", .skippingUnknown) == [65, 66, 67])
        #expect(Base64.decode("QUJ\u{e9}D", .skippingUnknown) == [65, 66, 67])
        #expect(Base64.decode("QQ= =", .skippingUnknown) == [65])
        #expect(Base64.decode("", .skippingUnknown) == [])
        #expect(Base64.decode("!!!", .skippingUnknown) == nil)
        // Foundation read these two as no bytes (four unknown characters); nothing but junk is refused.
        #expect(Base64.decode("-_-_", .skippingUnknown) == nil)
        #expect(Base64.decode("    ", .skippingUnknown) == nil)
        #expect(Base64.decode("QQ", .skippingUnknown) == nil)
        // Foundation read these as `A`, dropping what followed the padding; they are refused.
        #expect(Base64.decode("QQ==QUJD", .skippingUnknown) == nil)
        #expect(Base64.decode("QQ==QQ==", .skippingUnknown) == nil)
    }

    /// `.lenient` (the default; BLIP, `_bulk_get`, Basic credentials) is unchanged: whitespace and `=` anywhere are
    /// skipped, padding is optional, base64url is read, other characters and a dangling digit fail.
    @Test func lenientIsUnchanged() {
        #expect(Base64.decode("QQ") == [65])
        #expect(Base64.decode("QU JD\n") == [65, 66, 67])
        #expect(Base64.decode("-_-_") == [251, 255, 191])
        #expect(Base64.decode("====") == [])
        #expect(Base64.decode("QUJD*") == nil)
        #expect(Base64.decode("QUJDR") == nil)
    }
}
