/// Basic-auth credentials a listener makes when it starts and forgets when it stops, so a sync URL
/// shown as a QR code works for one session only. Drawn from `SystemRandomNumberGenerator`, which
/// on Linux reads the kernel's CSPRNG (`getrandom(2)`): 8 bytes of user name suffix and 24
/// characters (144 bits) of password from the URL-safe base64 alphabet.
public struct OneTimeCredentials: Sendable, Equatable {
    public let user: String
    public let password: String

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    public init() {
        var rng = SystemRandomNumberGenerator()
        let suffix = (0..<8).map { _ in String(UInt8.random(in: 0...255, using: &rng), radix: 16) }
            .map { $0.count == 1 ? "0" + $0 : $0 }.joined()
        user = "peer-" + suffix
        password = String((0..<24).map { _ in Self.alphabet[Int.random(in: 0..<64, using: &rng)] })
    }

    /// Given credentials (the fuzz target's; a listener always makes its own).
    init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// Constant-time comparison of a presented pair against these credentials.
    public func matches(user presentedUser: String, password presentedPassword: String) -> Bool {
        var diff: UInt8 = 0
        for (a, b) in zip(
            Array(presentedUser.utf8) + Array(presentedPassword.utf8), Array(user.utf8) + Array(password.utf8))
        {
            diff |= a ^ b
        }
        return diff == 0 && presentedUser.utf8.count == user.utf8.count
            && presentedPassword.utf8.count == password.utf8.count
    }
}
