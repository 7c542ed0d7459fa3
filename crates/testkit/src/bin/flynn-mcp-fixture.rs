//! The MCP fixture server over stdio, for Flynn's MCP client tests: see
//! `flynn_testkit::mcp`. Logs what it sees to the file named by
//! `FLYNN_MCP_FIXTURE_LOG`.

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("flynn-mcp-fixture: cannot start a runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(flynn_testkit::mcp::serve_stdio()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("flynn-mcp-fixture: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
