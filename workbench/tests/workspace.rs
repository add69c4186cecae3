//! Which workspace the workbench uses: the one named by `WORKBENCH_WORKSPACE`, else the one
//! around the current directory, else the one it was compiled in; `workbench plugins` says
//! which, and how it was found.

use crate::common;
use crate::scratch_workspace;

use common::{run, temp_dir, workbench};

fn first_line(stdout: &str) -> &str {
    stdout.lines().next().unwrap_or_default()
}

#[test]
fn the_workspace_is_found_from_the_variable_the_current_directory_or_the_build() {
    let scratch = scratch_workspace::create("workspace-lookup");
    let inside = scratch.join("plugins");

    let (code, stdout, stderr) = run(workbench(&inside).env_remove("WORKBENCH_WORKSPACE").arg("plugins"));
    assert_eq!(code, 0, "{stderr}");
    let expected = format!("workspace: {} (from the current directory)", scratch.display());
    assert_eq!(first_line(&stdout), expected, "{stdout}");

    let elsewhere = temp_dir("workspace-elsewhere");
    let (code, stdout, stderr) = run(workbench(&elsewhere).env_remove("WORKBENCH_WORKSPACE").arg("plugins"));
    assert_eq!(code, 0, "{stderr}");
    let main = scratch_workspace::main_root();
    assert_eq!(first_line(&stdout), format!("workspace: {} (where the binary was built)", main.display()));

    let (code, stdout, stderr) = run(workbench(&elsewhere).env("WORKBENCH_WORKSPACE", &scratch).arg("plugins"));
    assert_eq!(code, 0, "{stderr}");
    let canonical = scratch.canonicalize().unwrap();
    assert_eq!(first_line(&stdout), format!("workspace: {} (from WORKBENCH_WORKSPACE)", canonical.display()));
    // The option sets the same variable (workers started by this process inherit it).
    let (code, stdout, stderr) =
        run(workbench(&elsewhere).env_remove("WORKBENCH_WORKSPACE").arg("--workspace").arg(&scratch).arg("plugins"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first_line(&stdout), format!("workspace: {} (from WORKBENCH_WORKSPACE)", canonical.display()));
}
