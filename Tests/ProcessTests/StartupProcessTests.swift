import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What a newcomer sees when a node cannot start: a port that is taken makes `settee-server` exit 1 with a
/// message naming the address, for the admin port as for the KV port (it used to exit 0 when the admin port
/// was taken, and the KV message named no address).
@Suite(.serialized, .onTestThreads) struct StartupProcessTests {
    /// Holds `port` on 127.0.0.1 with a listening socket until `body` returns.
    private func holding<T>(_ port: Int, _ body: () throws -> T) throws -> T {
        let fd = try boundLoopbackSocket(port: port)
        defer { close(fd) }
        #expect(listen(fd, 4) == 0, "could not hold port \(port)")
        return try body()
    }

    /// Runs a node with these ports until it exits (at most 60 s); its exit status and standard error.
    private func runNode(admin: Int, kv: Int, views: Int) throws -> (Int32, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("settee-startup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let run = try ChildProcess.run(
            ServerProcess.binary,
            ["--data-dir", dir.path, "--admin-port", "\(admin)", "--kv-port", "\(kv)", "--views-port", "\(views)"],
            timeout: 60)
        return (run.status, run.output)
    }

    @Test func takenAdminPortExitsOneNamingTheAddress() throws {
        let (admin, kv, views) = (try freePort(), try freePort(), try freePort())
        let (status, output) = try holding(admin) { try runNode(admin: admin, kv: kv, views: views) }
        #expect(status == 1, "output:\n\(output)")
        #expect(output.contains("127.0.0.1:\(admin)"), "output:\n\(output)")
    }

    @Test func takenKVPortExitsOneNamingTheAddress() throws {
        let (admin, kv, views) = (try freePort(), try freePort(), try freePort())
        let (status, output) = try holding(kv) { try runNode(admin: admin, kv: kv, views: views) }
        #expect(status == 1, "output:\n\(output)")
        #expect(output.contains("127.0.0.1:\(kv)"), "output:\n\(output)")
        #expect(!output.contains("USAGE:"), "a runtime error must not print the usage text:\n\(output)")
    }
}
