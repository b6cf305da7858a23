/// The error map served by GET_ERROR_MAP (0xfe). The Couchbase SDK aborts on a map missing
/// `revision` or an entry missing `name`/`desc`/`attrs`, so every entry has all three.
enum ErrorMap {
    static let json: [UInt8] = {
        let entries: [(Int, String, String, [String])] = [
            (0x00, "SUCCESS", "Success", ["success"]),
            (0x01, "KEY_ENOENT", "Not Found", ["item-only"]),
            (0x02, "KEY_EEXISTS", "key already exists, or CAS mismatch", ["item-only"]),
            (0x03, "E2BIG", "Value is too big", ["invalid-input"]),
            (0x04, "EINVAL", "Invalid packet", ["internal", "invalid-input"]),
            (0x05, "NOT_STORED", "Not Stored", ["item-only"]),
            (0x06, "DELTA_BADVAL", "Existing document not a number", ["item-only", "invalid-input"]),
            (
                0x07, "NOT_MY_VBUCKET", "Server which received this command does not own the vBucket",
                ["fetch-config", "retry-now"]
            ),
            (0x08, "NO_BUCKET", "Not connected to a bucket", ["conn-state-invalidated"]),
            (0x09, "LOCKED", "Requested resource is locked", ["item-locked", "item-only", "retry-later"]),
            (0x0e, "NOT_LOCKED", "Requested resource is not locked", ["item-only"]),
            (0x20, "AUTH_ERROR", "Authentication failed", ["auth", "conn-state-invalidated"]),
            (0x21, "AUTH_CONTINUE", "Authentication continue", ["auth", "special-handling"]),
            (0x24, "EACCESS", "No access", ["support", "conn-state-invalidated"]),
            (0x81, "UNKNOWN_COMMAND", "Unknown command", ["support"]),
            (0x82, "ENOMEM", "Out of memory", ["temp", "retry-later"]),
            (0x83, "NOT_SUPPORTED", "Not supported", ["support"]),
            (0x84, "EINTERNAL", "Internal error", ["internal"]),
            (0x85, "EBUSY", "System is busy", ["temp", "retry-later"]),
            (0x86, "ETMPFAIL", "Temporary failure", ["temp", "retry-later"]),
            (0xa0, "DURABILITY_INVALID_LEVEL", "Invalid durability level", ["invalid-input"]),
            (0xa1, "DURABILITY_IMPOSSIBLE", "Durability requirements are impossible to achieve", ["item-only"]),
            (
                0xa3, "SYNC_WRITE_AMBIGUOUS",
                "The SyncWrite request has not completed in the specified time and has ambiguous result", ["item-only"]
            ),
        ]
        var s = "{\"version\":1,\"revision\":1,\"errors\":{"
        for (i, e) in entries.enumerated() {
            if i > 0 { s += "," }
            let attrs = e.3.map { "\"\($0)\"" }.joined(separator: ",")
            s += "\"\(String(e.0, radix: 16))\":{\"name\":\"\(e.1)\",\"desc\":\"\(e.2)\",\"attrs\":[\(attrs)]}"
        }
        s += "}}"
        return Array(s.utf8)
    }()
}
