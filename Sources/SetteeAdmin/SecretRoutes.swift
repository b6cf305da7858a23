import Hummingbird
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry

/// `POST /controller/rotateInternalSecret` (full admins only; `RBACPolicy`): replaces the secret nodes log in
/// to each other with, cluster-wide. Form field `graceSeconds` (0...`Limits.internalSecretMaxGraceSeconds`,
/// default `Limits.internalSecretGraceSeconds`): how long the previous secret keeps working. Made on the
/// orchestrator (forwarded there) and published to every member; answers `{"graceSeconds": N}`.
/// Changing the admin password (`POST /settings/web`) rotates the secret the same way with the default grace.
enum SecretRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.post("/controller/rotateInternalSecret") { request, _ in await rotate(request, api: api) }
    }

    static func rotate(_ request: Request, api: AdminAPI) async -> Response {
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await api.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        var grace = Limits.internalSecretGraceSeconds
        if let text = form["graceSeconds"] {
            guard let value = Int(text), (0...Limits.internalSecretMaxGraceSeconds).contains(value) else {
                let limit = Limits.internalSecretMaxGraceSeconds
                return AdminResponses.fieldErrors([
                    ("graceSeconds", "graceSeconds must be an integer from 0 to \(limit)")
                ])
            }
            grace = value
        }
        let registry = api.registry
        let seconds = grace
        do {
            try await api.configChange { claim in
                try registry.rotateInternalSecret(graceSeconds: seconds, claim: claim)
            }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch {
            return AdminResponses.general(.internalServerError, "could not rotate the secret: \(error)")
        }
        api.audit(.internalSecretRotated, [("grace_seconds", .int(seconds))])
        await api.publish()
        return AdminResponses.bytes(.ok, Array("{\"graceSeconds\":\(seconds)}".utf8))
    }
}
