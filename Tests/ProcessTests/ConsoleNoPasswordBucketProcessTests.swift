import Foundation
import SetteeGateway
import SetteeTestSupport
import Testing

/// Seed 000 through the console: a bucket without a password made with the create-bucket form, and the
/// gateway's refusal, for a config without credentials meeting a bucket with a password, saying what to change.
@Suite(.serialized, .onTestThreads) struct ConsoleNoPasswordBucketProcessTests {
    @Test func createBucketFormOffersNoPassword() async throws {
        // Proves: the console's create-bucket form offers the no-password access control and sends it as
        // `authType`; a POST in exactly the form's shape with that choice makes an `authType: none` bucket (the
        // form used to always make a bucket with a password); a gateway mount without credentials of a bucket
        // with a password fails with a message naming both fixes (no-password bucket, or credentials).
        let server = try ConsoleProcessTests.initialisedNode("console-nopw")
        defer { server.stopAndRemove() }
        let app = try server.http("GET", "/ui/app.js", useAuth: false).text
        #expect(app.contains(#"id="bucket-auth" name="authType""#))
        #expect(app.contains(#"<option value="none">No password"#))
        #expect(app.contains("authType: $('#bucket-auth').value"))

        // The fields app.js's submit handler sends, in its order.
        func form(_ name: String, auth: String) -> [(String, String)] {
            [
                ("name", name), ("ramQuota", "100"), ("replicaNumber", "0"), ("flushEnabled", "0"),
                ("bucketType", "couchbase"), ("authType", auth),
            ]
        }
        #expect(try server.http("POST", "/pools/default/buckets", form: form("open", auth: "none")).status == 202)
        #expect(try server.http("POST", "/pools/default/buckets", form: form("secret", auth: "sasl")).status == 202)
        for (name, auth) in [("open", "none"), ("secret", "sasl")] {
            let b = try server.http("GET", "/pools/default/buckets/\(name)").json() as? [String: Any]
            #expect(b?["authType"] as? String == auth, "bucket \(name)")
        }

        let url = "http://127.0.0.1:\(server.adminPort)"
        var refusal = ""
        do {
            let b = try await RemoteBucket(url: url, bucket: "secret", username: nil, password: nil)
            await b.close()
        } catch { refusal = "\(error)" }
        #expect(refusal.contains("without credentials"), "\(refusal)")
        #expect(refusal.contains("authType=none") && refusal.contains("No password"), "\(refusal)")
        #expect(refusal.contains(#"add "username" and "password""#), "\(refusal)")

        // The no-password bucket mounts with the same config (no credentials).
        var mounted = false
        for _ in 0..<50 where !mounted {
            do {
                let b = try await RemoteBucket(url: url, bucket: "open", username: nil, password: nil)
                await b.close()
                mounted = true
            } catch { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(mounted)
    }
}
