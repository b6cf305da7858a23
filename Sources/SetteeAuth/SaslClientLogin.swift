/// The SASL login every first-party client runs against a node's KV port (smart client, change streams,
/// node-to-node replication, and through the smart client the router and the gateway). Pure: the caller sends
/// what a directive says and feeds each answer back; the client nonce is injected, PBKDF2 runs inside
/// `receive` when the server's challenge arrives (a few milliseconds for 4,096 rounds).
///
/// States and events:
/// ```
///   start ──start()──▶ listing ──mechanisms──▶ scram(sent client-first) ──AUTH_CONTINUE(server-first)──▶
///   scramFinal(sent client-final) ──success(v=signature ok)──▶ succeeded
///                            └──mechanisms: only PLAIN, allowed──▶ plain ──success──▶ succeeded
///   any other answer ──▶ failed
/// ```
/// Invariants:
/// 1. SCRAM-SHA512 is chosen when offered, then SCRAM-SHA256, then SCRAM-SHA1; PLAIN only when the server
///    offers no SCRAM mechanism and `allowPlain` is set (the caller sets it for a TLS connection or when its
///    user opted in): the password never crosses a clear connection otherwise.
/// 2. A SCRAM login succeeds only when the server's final message proves it knows the user's keys
///    (`v=ServerSignature`, compared in constant time); a server that answers success without it fails.
/// 3. Every answer after `succeeded` or `failed` fails: one login per instance.
public struct SaslClientLogin: Sendable {
    /// What the transport should do next.
    public enum Directive: Equatable, Sendable {
        /// Send SASL_LIST_MECHS (no key, no value).
        case listMechanisms
        /// Send SASL_AUTH with `mechanism` as key and `payload` as value.
        case auth(mechanism: String, payload: [UInt8])
        /// Send SASL_STEP with `mechanism` as key and `payload` as value.
        case step(mechanism: String, payload: [UInt8])
        /// Logged in with `mechanism`.
        case succeeded(mechanism: String)
        /// The login failed; close or report.
        case failed(Failure)

        /// The request to send for this directive (opcode, key, value); nil when the exchange is over.
        public var request: (opcode: UInt8, key: [UInt8], value: [UInt8])? {
            switch self {
            case .listMechanisms: (SaslClientLogin.listMechanismsOpcode, [], [])
            case .auth(let mechanism, let payload): (SaslClientLogin.authOpcode, Array(mechanism.utf8), payload)
            case .step(let mechanism, let payload): (SaslClientLogin.stepOpcode, Array(mechanism.utf8), payload)
            case .succeeded, .failed: nil
            }
        }
    }

    public enum Failure: Error, Equatable, Sendable {
        /// The server offers no mechanism this client may use (`offered` is its list).
        case noAcceptableMechanism(offered: String)
        /// The server answered with this non-success status (wrong password, unknown user, throttled).
        case refused(status: UInt16)
        /// The server's challenge is malformed, does not extend our nonce, or asks for too many iterations.
        case badChallenge
        /// The server's final message does not prove it knows the user's keys.
        case serverNotVerified
        /// An answer the exchange does not expect at this point.
        case unexpectedAnswer
    }

    /// The server's answer to the last request, as the caller decoded it from the response frame.
    public enum Answer: Sendable {
        case success([UInt8])
        /// Status 0x21 AUTH_CONTINUE with its value.
        case authContinue([UInt8])
        /// Any other status.
        case refused(status: UInt16)

        /// The answer a response frame's status and value make.
        public init(status: UInt16, value: [UInt8]) {
            switch status {
            case 0x00: self = .success(value)
            case 0x21: self = .authContinue(value)
            default: self = .refused(status: status)
            }
        }
    }

    /// Memcached-binary opcodes of the exchange (kv_engine's SASL_LIST_MECHS, SASL_AUTH, SASL_STEP), so every
    /// shell builds its frames from the directive the same way.
    public static let listMechanismsOpcode: UInt8 = 0x20
    public static let authOpcode: UInt8 = 0x21
    public static let stepOpcode: UInt8 = 0x22

    /// Mechanisms in order of preference.
    public static let scramPreference: [ScramHash] = [.sha512, .sha256, .sha1]

    private enum State: Sendable {
        case start
        case listing
        case scramFirst(ScramClient)
        case scramFinal(ScramClient)
        case plain
        case succeeded
        case failed
    }

    public let username: String
    private let password: String
    public let allowPlain: Bool
    private let clientNonce: String
    private var state = State.start

    public init(username: String, password: String, allowPlain: Bool, clientNonce: String) {
        self.username = username
        self.password = password
        self.allowPlain = allowPlain
        self.clientNonce = clientNonce
    }

    /// The first request: SASL_LIST_MECHS.
    public mutating func start() -> Directive {
        guard case .start = state else { return fail(.unexpectedAnswer) }
        state = .listing
        return .listMechanisms
    }

    /// The mechanism this client uses from a SASL_LIST_MECHS answer, or nil when none is acceptable.
    public static func choose(offered: String, allowPlain: Bool) -> String? {
        let names = Set(offered.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init))
        if let hash = scramPreference.first(where: { names.contains($0.mechanism) }) { return hash.mechanism }
        return allowPlain && names.contains("PLAIN") ? "PLAIN" : nil
    }

    /// Handles the answer to the last request.
    public mutating func receive(_ answer: Answer) -> Directive {
        switch (state, answer) {
        case (.listing, .success(let list)):
            let offered = String(decoding: list, as: UTF8.self)
            guard let mechanism = Self.choose(offered: offered, allowPlain: allowPlain) else {
                return fail(.noAcceptableMechanism(offered: offered))
            }
            guard let hash = ScramHash(mechanism: mechanism) else {
                state = .plain
                return .auth(
                    mechanism: "PLAIN", payload: [0] + Array(username.utf8) + [0] + Array(password.utf8))
            }
            let client = ScramClient(hash: hash, username: username, password: password, clientNonce: clientNonce)
            state = .scramFirst(client)
            return .auth(mechanism: mechanism, payload: client.clientFirst)
        case (.scramFirst(var client), .authContinue(let serverFirst)):
            guard let final = client.receiveServerFirst(serverFirst) else { return fail(.badChallenge) }
            state = .scramFinal(client)
            return .step(mechanism: client.hash.mechanism, payload: final)
        case (.scramFinal(let client), .success(let serverFinal)):
            guard client.verifyServerFinal(serverFinal) else { return fail(.serverNotVerified) }
            state = .succeeded
            return .succeeded(mechanism: client.hash.mechanism)
        case (.plain, .success):
            state = .succeeded
            return .succeeded(mechanism: "PLAIN")
        case (.listing, .refused(let status)), (.scramFirst, .refused(let status)),
            (.scramFinal, .refused(let status)), (.plain, .refused(let status)):
            return fail(.refused(status: status))
        default:
            return fail(.unexpectedAnswer)
        }
    }

    private mutating func fail(_ failure: Failure) -> Directive {
        state = .failed
        return .failed(failure)
    }

    /// A fresh client nonce: 24 random alphanumeric characters (printable, never a comma).
    public static func randomNonce() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var rng = SystemRandomNumberGenerator()
        return String(decoding: (0..<24).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }, as: UTF8.self)
    }
}
