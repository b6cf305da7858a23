/// HTTP Basic authentication (RFC 7617): the one builder of an `Authorization` value and the one parser of
/// one, for every port and client (admin, views, gateway, Lite's listener, peer and replicator calls).
public enum BasicAuth {
    /// `Basic base64(user:password)`.
    public static func header(user: String, password: String) -> String {
        "Basic " + Base64.encode(Array("\(user):\(password)".utf8))
    }

    /// The user and password of an `Authorization` value; nil when absent, not Basic (the scheme is
    /// case-insensitive), not base64, not UTF-8 or without a colon. The password may contain colons.
    public static func parse(_ header: String?) -> (user: String, password: String)? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic", let decoded = Base64.decode(String(parts[1])),
            let text = String(validating: decoded, as: UTF8.self), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }
}
