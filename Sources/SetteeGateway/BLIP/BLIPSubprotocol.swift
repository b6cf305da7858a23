import Foundation

/// The replication subprotocols a `/db/_blipsync` WebSocket may speak, as the `Sec-WebSocket-Protocol` names them
/// (replication-protocol.adoc §2 "Connecting"; Sync Gateway's `blip_subprotocol.go`): `BLIP_3+CBMobile_3` for
/// Couchbase Lite 3.x (integer deletion flags in `changes`, `docID` on `getAttachment`, `getCollections`),
/// `BLIP_3+CBMobile_2` for 2.x. The client lists what it speaks, preferred first; the server picks the first it
/// supports and echoes it.
public enum BLIPSubprotocol: String, Sendable, CaseIterable, Comparable {
    case cbMobile2 = "BLIP_3+CBMobile_2"
    case cbMobile3 = "BLIP_3+CBMobile_3"

    /// The names this gateway speaks, newest first (the text of a refusal).
    public static var supportedNames: [String] { [cbMobile3.rawValue, cbMobile2.rawValue] }

    /// The first name of a `Sec-WebSocket-Protocol` header (comma-separated, possibly repeated headers joined)
    /// that this gateway speaks; nil when none is, or the header is absent.
    public static func negotiate(_ header: String?) -> BLIPSubprotocol? {
        guard let header else { return nil }
        for name in header.split(separator: ",") {
            let trimmed = name.trimmingCharacters(in: .whitespaces)
            if let p = BLIPSubprotocol(rawValue: trimmed) { return p }
        }
        return nil
    }

    public static func < (a: BLIPSubprotocol, b: BLIPSubprotocol) -> Bool { a.version < b.version }

    var version: Int {
        switch self {
        case .cbMobile2: return 2
        case .cbMobile3: return 3
        }
    }
}
