import Foundation
import Synchronization

/// A test's scratch directory under the system temporary directory, `settee-<label>-<UUID>`: created at once and
/// removed with everything in it when the last reference goes. The one helper of its kind for every test target;
/// `TemporaryDirectory.make` is the same for a directory its caller removes (or a child process keeps using).
package final class TemporaryDirectory: Sendable {
    package let path: String
    package var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    package init(_ label: String) {
        path = Self.make(label)
    }

    deinit { remove() }

    /// Removes the directory now. A local that calls this in a `defer` also stays alive until the scope ends, which
    /// a local only read for its `path` is not sure to.
    package func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// Creates a new directory and returns its path. The caller removes it; whatever is still there when the test
    /// process exits is removed then (Lite's tests hand the path to a database and never remove it: 43 directories
    /// a run were left behind).
    package static func make(_ label: String) -> String {
        _ = removeAtExit
        let path = NSTemporaryDirectory() + "settee-\(label)-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        made.withLock { $0.append(path) }
        return path
    }

    private static let made = Mutex<[String]>([])
    private static let removeAtExit: Void = {
        atexit {
            for path in TemporaryDirectory.made.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
        }
    }()
}
