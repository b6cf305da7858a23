import Dispatch

/// Runs blocking work (disk, PBKDF2) on a dispatch queue, never on an event loop, and resumes the
/// calling task with its result.
enum Blocking {
    private static let queue = DispatchQueue(label: "settee.admin.blocking", attributes: .concurrent)

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: body()) }
        }
    }
}
