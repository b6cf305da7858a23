import Crypto
import Foundation
import SetteeCore

/// What a logs collection does to user data with `logRedactionLevel=partial`: every `<ud>…</ud>` span of a log or
/// audit line becomes `<ud>` + the lowercase hex SHA-1 of (salt + the span's text) + `</ud>`, as Couchbase's
/// `cbcollect_info` does (salted SHA-1, so the same value maps to the same digest within one collection and lines can
/// still be correlated, while a dictionary of likely names cannot be matched without the salt). The salt is random
/// per collection and never written into the archive.
public struct UserDataRedaction: Sendable {
    public let salt: String

    public init(salt: String = RandomID.hex128()) {
        self.salt = salt
    }

    /// The digest that replaces `text`.
    public func digest(_ text: some StringProtocol) -> String {
        let hash = Insecure.SHA1.hash(data: Array((salt + String(text)).utf8))
        return hash.map { b in (b < 16 ? "0" : "") + String(b, radix: 16) }.joined()
    }

    /// `text` with each `<ud>…</ud>` span's content replaced by its digest (an unclosed `<ud>` hides the rest of the
    /// line, so a cut line never leaks the data it starts).
    public func redact(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let open = rest.range(of: "<ud>") {
            out += rest[..<open.lowerBound]
            let after = rest[open.upperBound...]
            if let close = after.range(of: "</ud>") {
                out += "<ud>" + digest(after[..<close.lowerBound]) + "</ud>"
                rest = after[close.upperBound...]
            } else {
                let lineEnd = after.firstIndex(of: "\n") ?? after.endIndex
                out += "<ud>" + digest(after[..<lineEnd]) + "</ud>"
                rest = after[lineEnd...]
            }
        }
        out += rest
        return out
    }
}
