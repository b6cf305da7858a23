import SetteeCore

/// Validation of user, role and channel names (Sync Gateway's rules, with our length limits).
public enum Names {
    /// The prefix that marks a role in `access()` targets and `role()` values.
    public static let rolePrefix = "role:"

    /// User and role names: `^[-+.@%\w]*$` (letters, digits, `_`, `-`, `+`, `.`, `@`, `%`), at most
    /// `Limits.maxPrincipalNameLength` bytes. The empty name is GUEST.
    public static func isValidPrincipalName(_ name: String) -> Bool {
        guard name.utf8.count <= Limits.maxPrincipalNameLength else { return false }
        return name.unicodeScalars.allSatisfy { c in
            c == "-" || c == "+" || c == "." || c == "@" || c == "%" || c == "_"
                || c.properties.isAlphabetic || c.properties.numericType == .decimal
        }
    }

    /// Channel names: non-empty, no `,` (it separates channels in `?channels=`), at most
    /// `Limits.maxChannelNameLength` bytes.
    public static func isValidChannelName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= Limits.maxChannelNameLength && !name.utf8.contains(UInt8(ascii: ","))
    }
}
